"""Hypothesis strategies shared by the fuzz tests (tests/fuzz); import it after
``pytest.importorskip("hypothesis")``."""

from hypothesis import strategies as st


@st.composite
def mutated(draw, raw: bytes) -> bytes:
    """``raw`` after a few random edits; the edits favour digits, separators and header bytes."""
    data = bytearray(raw)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "cut", "insert", "duplicate", "digit"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "cut":
            data = data[:at] if draw(st.booleans()) else data[:at] + data[at + draw(st.integers(1, 64)) :]
        elif kind == "insert":
            data[at:at] = draw(
                st.one_of(
                    st.binary(min_size=1, max_size=8),
                    st.sampled_from(
                        [b"nan", b"inf", b"-", b"2.9", b"1e39", b"?", b",", b":", b"\n", b"\xff\xfe", b"\0\0\0\x09"]
                    ),
                )
            )
        elif kind == "duplicate" and data:
            data[at:at] = data[at : at + draw(st.integers(1, 256))]
        elif kind == "digit" and data:
            data[at] = ord(str(draw(st.integers(0, 9))))
    return bytes(data)
