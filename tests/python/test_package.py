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


def test_onnx_bytes_with_external_data_are_refused_naming_the_initializer():
    import pytest
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    w = helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, 2.0])
    w.ClearField("float_data")
    w.data_location = TensorProto.EXTERNAL
    w.external_data.add(key="location", value="weights.bin")
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], [w])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    with pytest.raises(lnverify.ModelError, match=r"<mem>: initializer 'w'.*external"):
        lnverify._core.Graph.from_onnx_bytes(data, "<mem>")


def test_onnx_bytes_import_names_ops_and_params():
    import pytest
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    w = helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, 2.0])
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])], [w])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    g = lnverify._core.Graph.from_onnx_bytes(data, "<mem>")
    assert g.inputs == [("x", [3, 2])]
    assert g.params == [("w", [2])]
    assert [n["op"] for n in g.nodes] == ["add"]
    assert list(g.param_values("w")) == [1.0, 2.0]
