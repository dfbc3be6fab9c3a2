"""CharLM: steps equal the teacher-forced pass, and the decoding interface."""

import torch

from attnkit.decoding import greedy
from attnkit.models import CharLM


def test_steps_equal_forward():
    torch.manual_seed(0)
    lm = CharLM(9, emb=5, hidden=8, layers=2).double().eval()
    tgt_in = torch.randint(3, 9, (3, 6))
    tgt_in[:, 0] = 1
    logits = lm(tgt_in)
    state = lm.start(3, "cpu")
    assert state["h"].shape == (3, 2, 8)
    for t in range(6):
        log_probs, state, weights = lm.step(tgt_in[:, t], state)
        torch.testing.assert_close(log_probs, logits[:, t].log_softmax(-1))
        assert weights is None
    out = greedy(lm.step, lm.start(3, "cpu"), batch_size=3, bos=1, eos=2, max_len=4)
    assert out.tokens.shape[0] == 3 and out.weights is None
