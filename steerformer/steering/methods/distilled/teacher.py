"""The teacher's data: the same model, told the concept in the user turn, answers the training
questions (greedy); the student will see each question without the instruction, followed by the
teacher's answer. The base model's own greedy answers to the same questions are the neutral text of
the KL penalty."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any, Sequence

from ....configs import progress_bar
from ....errors import bad_argument
from ....prompts import REPORT_QUESTIONS, SELECTION_QUESTIONS, TRAIN_QUESTIONS
from ...chat import chat_rows, generate_answers


@dataclasses.dataclass
class Example:
    """One training question: the student's prompt (the question alone), the teacher's prompt (the
    question with the concept instruction), the teacher's answer and the base model's answer (token ids)."""

    question: str
    student: list[int]
    teacher: list[int]
    answer: list[int]
    neutral: list[int]


def instructed(instruction: str, question: str, concept: str) -> str:
    """The teacher's user turn: ``instruction`` with ``{question}`` and ``{concept}`` filled in."""
    return instruction.format(question=question, concept=concept)


def read_questions(path: Any) -> list[str]:
    """The user's questions: a text file, one per line (blank lines skipped)."""
    p = Path(str(path)).expanduser()
    if not p.is_file():
        raise bad_argument("questions", str(path), "a text file of questions, one per line", "Check the path.")
    lines = [line.strip() for line in p.read_text(encoding="utf-8", errors="replace").splitlines()]
    return [q for q in lines if q]


def training_questions(given: Any = None) -> list[str]:
    """The teacher's questions: ``given`` (strings), else the built-in TRAIN questions. The selection
    and report questions are refused: the strength is chosen on the first and reported on the second."""
    if given is None:
        return list(TRAIN_QUESTIONS)
    if isinstance(given, str) or not all(isinstance(q, str) for q in given):
        raise bad_argument("prompts", str(given)[:80], "a list of questions (strings) for the teacher to answer")
    questions = [q.strip() for q in given if q.strip()]
    if not questions:
        raise bad_argument("prompts", list(given), "at least one non-empty question")
    held = sorted(set(questions) & (set(SELECTION_QUESTIONS) | set(REPORT_QUESTIONS)))
    if held:
        raise bad_argument("prompts", held[0], "questions other than the built-in selection and report questions "
                           "(the strength is chosen on the first, the method reported on the second)",
                           "Leave them out, or use questions of your own.")
    return questions


def teacher_examples(model: Any, tokenizer: Any, questions: Sequence[str], concept: str, instruction: str, *,
                     max_answer_tokens: int = 32, progress: Any = True) -> list[Example]:
    """One :class:`Example` per question: the teacher's greedy answer to the instructed question, and
    the base model's greedy answer to the question alone. Answers cut to nothing are dropped."""
    bar = progress_bar(progress, "distilled: teacher and base answers", total=2)
    student = chat_rows(tokenizer, questions, name="prompts")
    teacher = chat_rows(tokenizer, [instructed(instruction, q, concept) for q in questions], name="prompts")
    answers = generate_answers(model, tokenizer, teacher, max_new_tokens=max_answer_tokens)
    bar.update(1)
    neutral = generate_answers(model, tokenizer, student, max_new_tokens=max_answer_tokens)
    bar.update(1)
    bar.close()
    out = [Example(question=q, student=list(s), teacher=list(t), answer=list(a), neutral=list(n))
           for q, s, t, a, n in zip(questions, student, teacher, answers, neutral) if a]
    if not out:
        raise bad_argument("instruction", instruction, "an instruction the model answers (every teacher answer was "
                           "empty)", "Check the model's chat template, or raise max_answer_tokens.")
    return out


def data_sha256(examples: Sequence[Example]) -> str:
    """sha256 of the training data as token ids (student prompt, teacher prompt, answer, neutral answer)."""
    h = hashlib.sha256()
    for e in examples:
        h.update(json.dumps([e.student, e.teacher, e.answer, e.neutral]).encode())
    return h.hexdigest()


__all__ = ["Example", "data_sha256", "instructed", "read_questions", "teacher_examples", "training_questions"]
