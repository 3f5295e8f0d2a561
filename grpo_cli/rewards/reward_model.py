"""A reward model scored outside a trainer (check-rewards), exactly as GRPOTrainer scores it."""

from __future__ import annotations

from typing import Any

from grpo_cli.errors import GrpoError


class RewardModelScorer:
    """A reward model as a plain reward function, scored the way GRPOTrainer scores it.

    Training hands TRL the path string; `check-rewards` (and anything scoring outside a trainer)
    uses this: same text (chat template of prompt + completion, or their concatenation), right
    padding, no special tokens added, logits[:, 0].
    """

    def __init__(self, ref: str, label: str, *, chat_template_kwargs: dict[str, Any] | None = None,
                 batch_size: int = 16, where: str = "rewards") -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        try:
            self.tokenizer = AutoTokenizer.from_pretrained(ref)
            self.model = AutoModelForSequenceClassification.from_pretrained(ref, num_labels=1)
        except (OSError, ValueError) as exc:
            raise GrpoError(f"cannot load the reward model {ref}: {str(exc).splitlines()[0]}", where=where,
                            fix="Give a directory saved with save_pretrained (config.json, weights, tokenizer) "
                                "or a hub id reachable from here.") from None
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model.config.get_text_config().pad_token_id = self.tokenizer.pad_token_id
        self.model.eval()
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.batch_size = batch_size
        self.__name__ = label

    def texts(self, prompts: list[Any], completions: list[Any]) -> list[str]:
        if prompts and isinstance(prompts[0], list):
            from trl.data_utils import apply_chat_template

            return [apply_chat_template({"messages": p + c}, self.tokenizer, **self.chat_template_kwargs)["text"]
                    for p, c in zip(prompts, completions, strict=True)]
        return [p + c for p, c in zip(prompts, completions, strict=True)]

    def __call__(self, *, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float | None]:
        import torch

        texts = self.texts(prompts, completions)
        out: list[float | None] = []
        for start in range(0, len(texts), self.batch_size):
            enc = self.tokenizer(text=texts[start:start + self.batch_size], return_tensors="pt", padding=True,
                                 padding_side="right", add_special_tokens=False)
            with torch.inference_mode():
                out.extend(float(x) for x in self.model(**enc).logits[:, 0])
        return out

    def __repr__(self) -> str:
        return f"<reward model {self.__name__}>"
