"""``distilled``: a low-rank edit of one or a few residual writers, trained so that the model
*without* a concept instruction imitates the same model *with* it (Prompt Baking, Bhargava et al.
2024; PSR, "Steer like the LLM", 2026) — the instruction baked into the weights.

* **Teacher** (``teacher.py``): the same model with the concept instruction in the user turn
  (AxBench's prompt baseline by default: "{question} You must include content related to {concept}
  in your answer, while still answering the question."; ``instruction=`` to change it). **Data**: its
  greedy answers to the TRAIN questions (``prompts.TRAIN_QUESTIONS``; ``prompts=`` or
  ``questions=FILE`` for your own), never the selection or report questions.
* **Objective** (``training.py``): the student sees the question alone, then the teacher's answer;
  ``objective="kl"`` (default) minimizes KL(teacher ‖ student) of the next-token distributions over
  the answer tokens, ``"states"`` the later layers' hidden-state gap, ``"kl+states"`` both; plus
  ``kl_weight`` × KL(base ‖ student) over the base model's own answers (neutral text).
* **Edit**: ΔW = U A (rank ``rank``) of the ``writer`` (MLP output by default) of each of ``layers``
  (default: 0.5 and 0.65 of the model's depth), trained as a LoRA forward and written as plain
  :class:`~steerformer.steering.edit.Edit` values of kind ``"lora"``: they apply, undo bit for bit,
  save, reload and export as every weight edit (PEFT adapter, merged checkpoint, GGUF model). A
  control vector cannot carry it: the change depends on each token's input (the export refuses).
* **Strength** (``strength.py``): γ, a scale on ΔW, chosen on the SELECTION questions' answers — the
  best judged aggregate with KL ≤ ``kl_ceiling`` — from ``gains``.
* **Record**: the data's sha256, the instruction, the objective, layers, rank, steps, the losses,
  the judged scores of every strength tried, the split and the seconds (``record.details.training``).

Options: :class:`~.config.DistilledConfig` (``config.py``, torch-free). Measured on SmolLM2 in
docs/steering-chat.md, "The distilled method". Registered by ``method.py``; this package imports
nothing, so ``config.py`` loads without torch (the CLI's flags), as in every method folder.
"""
