import os
import subprocess

import lnverify


def test_version_is_the_cli_version():
    out = subprocess.run([os.environ["LNVERIFY_CLI"], "--version"], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == f"lnverify {lnverify.__version__}"
    assert lnverify.__version__.count(".") == 2


def test_bad_onnx_bytes_are_a_model_error_naming_the_model():
    import pytest
    with pytest.raises(lnverify.ModelError, match="<mine>"):
        lnverify._core.Graph.from_onnx_bytes(b"\x08\x07garbage", "<mine>")
    with pytest.raises(ValueError):  # ModelError is a ValueError
        lnverify._core.Graph.from_onnx_bytes(b"", "<empty>")
