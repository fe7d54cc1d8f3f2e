"""One error type, one argument parser and one way out for every command-line entry point.

Why this exists: bad input must end in one ``error:`` line and exit status 2 -- never a traceback,
never a half-written folder -- and a config field must be checked before anything is written.
Every entry point (`planning_gym.make_data`, `pretrain.train`, `posttrain.train`, `engine.evaluate`,
...) therefore shares:

* `UsageError` -- bad input from the user; the other error classes of the project derive from it;
* `Parser` -- argparse whose errors are one line (no usage dump);
* `entry` -- runs a ``main`` and maps UsageError / OSError to exit 2, `Diverged` (a non-finite
  loss) to exit 3, Ctrl-C to exit 130;
* `spec` / `check_fields` / `parse_sets` / `fields_help` -- one declaration per config field
  (type, range, meaning) that validates it, parses ``--set field=value`` and prints ``--help``;
* `prepare_output` -- an output folder is checked (not a file, writable, empty unless resuming or
  forced) before long work starts.

No torch here: the gym's commands use it too.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
from pathlib import Path
from typing import Any, Callable


class UsageError(Exception):
    """Bad input from the user (unknown scale, missing corpus, corrupt checkpoint, ...).

    Entry points turn it into one ``error: ...`` line on stderr and exit status 2.
    """


class Diverged(UsageError):
    """Training stopped on a non-finite loss or gradient (exit status 3; the last good checkpoint is
    kept and nothing from the failing step is saved)."""
    exit_code = 3


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: a bad flag is a UsageError, not a usage dump; ``epilog``
    text (the config fields) is printed as written."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        raise UsageError(message)


def _interrupt_redelivery(fallback: Callable, pending: list) -> Callable:
    """An unraisable hook: a Ctrl-C that lands while a finalizer (``__del__``, e.g. a progress bar
    closing during a checkpoint save) runs is printed as "Exception ignored" and lost, and the run
    would go on. Send it again a moment later, when ordinary code runs (the timer goes in
    ``pending``, so that it can be cancelled); other unraisable errors are reported as usual."""
    def hook(unraisable) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            import signal
            import threading
            timer = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT))
            timer.daemon = True
            pending.append(timer)
            timer.start()
            return
        fallback(unraisable)
    return hook


def entry(main: Callable[[], int], *, rank0: bool = True) -> int:
    """Run ``main`` and turn user errors into one line: UsageError and OSError (an unwritable or
    full disk, a path that is a file) exit 2, Ctrl-C exits 130 leaving whatever was checkpointed."""
    say = (lambda m: print(m, file=sys.stderr, flush=True)) if rank0 else (lambda m: None)
    previous_hook, pending = sys.unraisablehook, []
    sys.unraisablehook = _interrupt_redelivery(previous_hook, pending)
    try:
        return main()
    except UsageError as exc:
        say(f"error: {exc}")
        return getattr(exc, "exit_code", 2)
    except OSError as exc:
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        say(f"error: {where}{exc.strerror or exc}")
        return 2
    except KeyboardInterrupt:
        say("interrupted: stopped; checkpoints already written are kept (rerun with --resume where the "
            "command has it)")
        return 130
    finally:
        sys.unraisablehook = previous_hook
        for timer in pending:
            timer.cancel()


# ----------------------------------------------------------------------------- config fields
def spec(default: Any, help: str, *, gt: float | None = None, ge: float | None = None,
         le: float | None = None, lt: float | None = None, choices: tuple | None = None) -> Any:
    """A dataclass field with its meaning and range: ``lr: float = spec(3e-3, "peak lr", gt=0)``."""
    return dataclasses.field(default=default, metadata=dict(help=help, gt=gt, ge=ge, le=le, lt=lt, choices=choices))


_KINDS = {"int": int, "float": float, "bool": bool, "str": str}


def coerce(field: dataclasses.Field, value: Any) -> Any:
    """Check a JSON value against a field's declared type (ints may stand for floats)."""
    kind = _KINDS[str(field.type)]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, bool) != (kind is bool) or not isinstance(value, kind):
        raise UsageError(f"config field {field.name} expects {kind.__name__}, got {value!r}")
    return value


def _range_text(meta: dict) -> str:
    parts = [f"{op} {meta[key]:g}" for key, op in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="))
             if meta.get(key) is not None]
    if meta.get("choices"):
        parts.append("one of " + ", ".join(map(str, meta["choices"])))
    return " and ".join(parts)


def check_fields(cfg: Any) -> None:
    """Every field of the dataclass instance ``cfg`` has its declared type, is finite (floats),
    and lies in its declared range; the first violation is a UsageError naming the field."""
    for f in dataclasses.fields(cfg):
        value = coerce(f, getattr(cfg, f.name))
        if isinstance(value, float) and not math.isfinite(value):
            raise UsageError(f"{f.name} must be finite, got {value}")
        meta = f.metadata
        bad = ((meta.get("gt") is not None and not value > meta["gt"])
               or (meta.get("ge") is not None and not value >= meta["ge"])
               or (meta.get("lt") is not None and not value < meta["lt"])
               or (meta.get("le") is not None and not value <= meta["le"])
               or (meta.get("choices") and value not in meta["choices"]))
        if bad:
            raise UsageError(f"{f.name} must be {_range_text(meta)}, got {value!r} ({meta.get('help', '')})")


def parse_sets(items: list[str], config_cls: type, fixed: tuple[str, ...] = ()) -> dict[str, Any]:
    """``--set field=value`` strings -> typed overrides (JSON values, else strings). Fields in
    ``fixed`` (``scale``, ``method``: chosen by their own flags) are refused."""
    known = {f.name: f for f in dataclasses.fields(config_cls)}
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if key in fixed:
            raise UsageError(f"{key} is chosen by --{key}, not --set")
        if not sep or key not in known:
            raise UsageError(f"--set expects field=value with a known field, got {item!r} "
                             "(--help lists the fields)")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        if isinstance(value, float) and not math.isfinite(value) or raw.strip().lower() in ("nan", "inf", "-inf",
                                                                                              "infinity", "-infinity"):
            raise UsageError(f"config field {key} must be finite, got {raw!r}")
        out[key] = coerce(known[key], value)
    return out


def fields_help(config_cls: type, presets: dict[str, dict] | None = None) -> str:
    """The ``--set`` fields of ``config_cls`` as ``--help`` text: name, type, default, range, meaning."""
    lines = ["--set fields (FIELD=VALUE; defaults are the tiny preset"
             + (f", overridden per scale: {', '.join(presets)}" if presets else "") + "):"]
    for f in dataclasses.fields(config_cls):
        rng = _range_text(f.metadata)
        lines.append(f"  {f.name:<22} {str(f.type):<5} {f.default!r:<12} {f.metadata.get('help', '')}"
                     + (f" [{rng}]" if rng else ""))
    return "\n".join(lines)


# ----------------------------------------------------------------------------- output folders
def prepare_output(path: str | Path, *, exists_ok: bool = False, what: str = "output folder") -> Path:
    """Check ``path`` before long work, creating nothing: not a file; writable (probed with a file
    when it exists, else its nearest existing parent must be a writable folder); and, unless
    ``exists_ok`` (resume / --force), empty. A full disk later is still an OSError, which `entry`
    turns into one line."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{what} {path} is a file, not a folder")
    if path.is_dir():
        if not exists_ok and any(path.iterdir()):
            raise UsageError(f"{what} {path} is not empty (pass --resume to continue it, --force to start over, "
                             "or choose another folder)")
        try:
            probe = path / f".write-probe-{os.getpid()}"
            probe.write_text("ok")
            probe.unlink()
        except OSError as exc:
            raise UsageError(f"cannot write {what} {path}: {exc.strerror or exc}") from None
        return path
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"cannot create {what} {path}: {parent} is not a writable folder")
    return path


def append_jsonl(path: Path, row: dict) -> None:
    """Append one JSON line in a single write (a kill leaves at most one torn last line)."""
    data = (json.dumps(row) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def read_jsonl(path: Path, *, warn: Callable[[str], None] | None = None) -> list[dict]:
    """The rows of a JSONL log; a torn (unparseable) last line -- what a kill leaves -- is dropped
    with a warning; a bad line elsewhere is a UsageError."""
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        return []
    rows = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                (warn or (lambda m: print(m, file=sys.stderr)))(f"warning: dropped a torn last line of {path}")
                continue
            raise UsageError(f"corrupt log {path}: line {i + 1} is not JSON") from None
    return rows
