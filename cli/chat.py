"""`steerformer chat`: talk with a model or a steered checkpoint in the terminal (thin: the work is
``steerformer.steering.conversation``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer
from steerformer.errors import SteerformerError, bad_argument
import steerformer.steering as steering  # the lazy face: names resolve (and torch loads) when a command runs
from steerformer_cli._common import MODEL_HELP, cli_message, library_bars, user_errors
from steerformer_cli.app import app

COMMANDS = ("/strength X  scale the steering edit (0 = base model, 1 = as saved)", "/undo  forget the last exchange",
            "/save DIR  write the steered checkpoint (at strength 1)", "/quit  leave (or Ctrl-D)")


@app.command("chat")
def chat_cmd(
    model: str = typer.Argument(..., help=MODEL_HELP + " A folder written by `steer --out` chats steered."),
    compare: bool = typer.Option(False, "--compare", help="Answer each message twice: the base model (the edit "
                                 "undone in memory) and the steered one."),
    strength: Optional[float] = typer.Option(None, "--strength", help="Scale the saved steering edit (0 = the base "
                                             "model, 1 = as saved, default); /strength X inside the chat."),
    max_new_tokens: int = typer.Option(200, "--max-new-tokens", help="At most this many tokens per answer."),
    system: Optional[str] = typer.Option(None, "--system", help="A system message before the conversation."),
    quiet: bool = typer.Option(False, "--quiet", help="No loading lines or bars; only the conversation."),
    device: Optional[str] = typer.Option(None, "--device", help="Run the model on this device (cpu, cuda, cuda:1)."),
) -> None:
    """Talk with a causal LM or a steered checkpoint: answers streamed as they are generated, through the
    model's chat template (greedy). Commands: /strength X, /undo, /save DIR, /quit.

    Example: steerformer chat runs/steer/smollm2 --compare
    """
    with user_errors():
        if max_new_tokens < 1:
            raise bad_argument("--max-new-tokens", max_new_tokens, "a whole number >= 1")
        if strength is not None:
            steering.check_strength(strength, "--strength")
        local = Path(model).expanduser()
        if (compare or strength is not None) and local.is_dir() and not (local / "steerformer" / "record.json").is_file():
            flag = "--compare" if compare else "--strength"
            raise bad_argument(flag, str(model) if compare else strength, "a steered checkpoint (a folder written by "
                               "`steer --out`, which holds steerformer/record.json)",
                               f"{model} is not one: chat with it without {flag}, or steer it first.")
        say = (lambda line: typer.echo(line, err=True)) if not quiet else (lambda line: None)
        with library_bars(not quiet):
            m, tok = load_chat_model(model, device)
        session = Session(m, tok, max_new_tokens=max_new_tokens, system=system, compare=compare, strength=strength)
        say(f"loaded {model}" + (f" (steered: {', '.join(session.dial.weights)}; strength {session.dial.strength:g})"
                                 if session.dial is not None else ""))
        say("commands: " + "; ".join(COMMANDS))
        session.loop()


def load_chat_model(model: str, device: Optional[str]):
    """The model (a causal LM; a steered folder with its chain attached) and its tokenizer."""
    from steerformer.loading import load_tokenizer

    m = steering.load_for_steering(model, device=device)
    if steering.head_kind(m) != "causal-lm":
        raise bad_argument("model", model, "a causal language model (one that generates text)",
                           f"{type(m).__name__} does not generate; chat with a decoder such as smollm2.")
    return m, load_tokenizer(m)


class Session:
    """The terminal around a :class:`~steerformer.steering.conversation.Conversation`."""

    def __init__(self, model, tokenizer, *, max_new_tokens: int, system: Optional[str], compare: bool,
                 strength: Optional[float]) -> None:
        self.model = model
        self.dial = steering.StrengthDial(model) if steering.is_steered(model) else None
        if self.dial is None and (compare or strength is not None):
            raise bad_argument("--compare" if compare else "--strength", "", "a steered checkpoint (a folder written "
                               "by `steer --out`)", "Chat with this model without it, or steer it first.")
        if strength is not None:
            self.dial.set(strength)
        self.steered = steering.Conversation(model, tokenizer, max_new_tokens=max_new_tokens, system=system)
        self.base = steering.Conversation(model, tokenizer, max_new_tokens=max_new_tokens, system=system) \
            if compare else None

    def loop(self) -> None:
        while True:
            try:
                line = input("you> ")
            except (EOFError, KeyboardInterrupt):
                typer.echo("")
                return
            line = line.strip()
            if not line:
                continue
            try:
                if line.startswith("/"):
                    if self.command(line) == "quit":
                        return
                else:
                    self.say(line)
            except SteerformerError as exc:
                typer.echo(f"error: {cli_message(exc)}", err=True)

    def answer(self, conv, label: str, message: str, strength: Optional[float]) -> str:
        if strength is not None and self.dial is not None and self.dial.strength != strength:
            self.dial.set(strength)
        sys.stdout.write(f"{label}> ")
        sys.stdout.flush()

        def show(piece: str) -> None:
            sys.stdout.write(piece)
            sys.stdout.flush()

        text = conv.reply(message, show)
        sys.stdout.write("\n")
        sys.stdout.flush()
        return text

    def say(self, message: str) -> None:
        strength = self.dial.strength if self.dial is not None else None
        if self.base is not None:
            base = self.answer(self.base, "base", message, 0.0)
            steered = self.answer(self.steered, f"steered x{strength:g}", message, strength)
            self.base.add(message, base)
        else:
            steered = self.answer(self.steered, "steered" if self.dial is not None and strength == 1 else
                                  f"steered x{strength:g}" if self.dial is not None else "model", message, None)
        self.steered.add(message, steered)
        if self.dial is not None and self.dial.strength != strength:
            self.dial.set(strength)

    def command(self, line: str) -> Optional[str]:
        name, _, arg = line.partition(" ")
        arg = arg.strip()
        if name in ("/quit", "/exit", "/q"):
            return "quit"
        if name == "/help":
            typer.echo("commands: " + "; ".join(COMMANDS))
        elif name == "/undo":
            gone = self.steered.undo()
            if self.base is not None:
                self.base.undo()
            typer.echo(f"forgot: {gone.user!r}" if gone is not None else "nothing to undo")
        elif name == "/strength":
            self.set_strength(arg)
        elif name == "/save":
            self.save(arg)
        else:
            raise bad_argument("command", name, "one of /strength X, /undo, /save DIR, /quit, /help",
                               "Type /help for what each does.")
        return None

    def set_strength(self, arg: str) -> None:
        if self.dial is None:
            raise bad_argument("/strength", arg, "a steered model (this one has no steering edit to scale)",
                               "Chat with a folder written by `steer --out`.")
        if arg:
            self.dial.set(steering.check_strength(arg, "/strength"))
        typer.echo(f"strength {self.dial.strength:g}")

    def save(self, arg: str) -> None:
        if not arg:
            raise bad_argument("/save", "", "a folder to write the steered checkpoint to", "Type /save DIR.")
        if self.dial is None:
            raise bad_argument("/save", arg, "a steered model (nothing was steered to save)",
                               "Chat with a folder written by `steer --out`.")
        if self.dial.strength != 1.0:
            raise bad_argument("/save", arg, f"strength 1 (the recorded edit; at strength {self.dial.strength:g} the "
                               "weights are no recorded edit, so no record could undo or verify them)",
                               "Type /strength 1 first, or steer again with a larger or smaller --max-kl.")
        path = steering.save_steered(self.model, Path(arg).expanduser())  # the output rules: a new or own folder only
        typer.echo(f"saved to {path}")
