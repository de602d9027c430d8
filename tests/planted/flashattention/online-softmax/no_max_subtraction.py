# drill: flashattention/online-softmax
# planted: exponentials are never shifted by the max, so 1e4 overflows
# expect-fail: Blocks of ±1e4
# expect-fail: Logits of 1e4 and -1e4
# expect-fail: The worked example
import numpy as np

def online_softmax_update(m, l, block):
    with np.errstate(over='ignore'):
        return max(m, float(np.max(block))), l + float(np.exp(block).sum())


def online_softmax(x, block_size):
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over='ignore', invalid='ignore'):
        e = np.exp(x)
        return e / e.sum(axis=-1, keepdims=True)

