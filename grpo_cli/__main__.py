"""Allow `python -m grpo_cli`, which is also how `grpo train` re-launches itself."""

from grpo_cli.cli import main

main()
