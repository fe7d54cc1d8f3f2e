"""Shared test fixtures. No torch import here: the gym's tests run without torch."""
import pytest


@pytest.fixture(scope="module")
def one_thread():
    """Tiny ops on a shared 2-core machine: one thread avoids OpenMP contention stalls.
    Use with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def fake_pretrain(monkeypatch):
    """Replace `pretrain.train.main` with a recorder that writes a tokenizer (only when the run
    has none) and a summary, as the real trainer does."""
    import json
    from pathlib import Path
    calls = []

    def fake_main(argv):
        out = Path(argv[argv.index("--out") + 1])
        calls.append(out.name)
        tok = out / "tokenizer" / "tokenizer.json"
        if not tok.exists():
            tok.parent.mkdir(parents=True)
            tok.write_text(json.dumps({"trained_for": out.name}))
        (out / "summary.json").write_text("{}")
        return 0

    import pretrain.train
    from reproduce.store import Store
    monkeypatch.setattr(pretrain.train, "main", fake_main)
    monkeypatch.setattr(Store, "corpus", lambda self, **changes: self.data_dir / self.corpus_config(**changes).name)
    return calls
