"""RoBERTa and XLM-RoBERTa: BERT's modules under another prefix; positions offset by
padding_idx + 1, which the model's own embeddings apply (``embed`` runs them)."""

from __future__ import annotations

from .bert import BertAdapter


class RobertaAdapter(BertAdapter):
    model_type = "roberta"
    base_model_prefix = "roberta"


class XLMRobertaAdapter(BertAdapter):
    model_type = "xlm-roberta"
    base_model_prefix = "roberta"
