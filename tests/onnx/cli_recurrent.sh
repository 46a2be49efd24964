#!/usr/bin/env bash
# Recurrent layers from PyTorch (scripts/make_onnx_recurrent_models.py): nn.RNN, nn.LSTM,
# a bidirectional nn.LSTM, a two-layer nn.GRU, and a bidirectional nn.RNN without and with a
# learned initial state between two LayerNorms import without an opaque node; `audit` finds ln_in foldable and ln_out not (it reads the recurrent
# output, docs/spec/semantics.md "Gated recurrent layers"); `check` proves both verdicts;
# `eval` runs. Bad LSTM/GRU/RNN nodes (direction, hidden_size, activation, shapes,
# sequence_lens) exit 2 naming the node, and import writes nothing. Activation lists equal
# to the defaults import as the ops; others are opaque, the reason naming them.
#   bash tests/onnx/cli_recurrent.sh PATH/TO/lnverify
set -uo pipefail
source "$(dirname "$0")/../cli_lib.sh" "$1"
D="$ROOT/tests/data/onnx"

for m in rnn_lm_tiny lstm_lm_tiny lstm_lm_bi_tiny gru_lm_2layer_tiny rnn_lm_bi_tiny rnn_lm_bi_h0_tiny; do
  M="$D/${m}_opset17.onnx"
  run "$m: audit" 0 "$LNV" audit "$M" --dim batch=2 --dim seq=5
  has "$m: ln_in folds, ln_out does not" "1 of 2 LayerNorms foldable \(inference\), 1 \(training\)"
  lacks "$m: no opaque node" "opaque"
  run "$m: check holds" 0 "$LNV" check "$M" --dim batch=2 --dim seq=5
  run "$m: eval" 0 "$LNV" eval "$M" --dim batch=2 --dim seq=5 --bits 64
  has "$m: the logits" "output /head/Add \[2, 5, 32\]"
done
run "lstm_lm_bi_tiny: import" 0 "$LNV" import "$D/lstm_lm_bi_tiny_opset17.onnx" --dim batch=2 --dim seq=5 -o "$T/bi.json"
grep -q '"op": "lstm"' "$T/bi.json" && ok "bi.json: one lstm node" || bad "bi.json has no lstm node"
grep -q '"direction": "bidirectional"' "$T/bi.json" && ok "bi.json: direction bidirectional" || bad "bi.json lacks the direction"
run "rnn_lm_bi_h0_tiny: import" 0 "$LNV" import "$D/rnn_lm_bi_h0_tiny_opset17.onnx" --dim batch=2 --dim seq=5 -o "$T/rnn_bi.json"
[ "$(grep -c '"op": "rnn"' "$T/rnn_bi.json")" = 2 ] && ok "rnn_bi.json: an rnn per direction" || bad "rnn_bi.json: not two rnn nodes"
grep -q '"name": "/rnn/RNN.reverse.reversed"' "$T/rnn_bi.json" && ok "rnn_bi.json: the reverse direction reads x reversed" || bad "rnn_bi.json: no reversed input"
[ "$(grep -c '"op": "rnn".*with_R' "$T/rnn_bi.json")" = 2 ] && ok "rnn_bi.json: both directions start from h0 ([W | R])" || bad "rnn_bi.json: h0 not read"

/usr/bin/python3 - "$T" <<'PY' || { bad "building the bad models"; finish; exit 1; }
import os, sys
import numpy as np
from onnx import helper as h, numpy_helper, TensorProto as TP

out = sys.argv[1]
rng = np.random.default_rng(0)
T, N, F, H = 3, 2, 4, 5


def t(name, a):
    return numpy_helper.from_array(np.asarray(a, dtype=np.float32), name)


def save(name, op, gates, attrs, w_shape=None, extra_inputs=(), extra_inits=(), inputs=None):
    w_shape = w_shape or (1, gates * H, F)
    inits = [t("W", rng.standard_normal(w_shape)), t("R", rng.standard_normal((1, gates * H, H))),
             t("B", rng.standard_normal((1, 2 * gates * H)))] + list(extra_inits)
    node = h.make_node(op, ["x", "W", "R", "B"] + list(extra_inputs), ["y"], name="bad_" + op.lower(), **attrs)
    g = h.make_graph([node], "g", inputs or [h.make_tensor_value_info("x", TP.FLOAT, [T, N, F])],
                     [h.make_tensor_value_info("y", TP.FLOAT, ["t", "d", "n", "h"])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    with open(os.path.join(out, name), "wb") as f:
        f.write(m.SerializeToString())


save("direction.onnx", "LSTM", 4, {"hidden_size": H, "direction": "sideways"})
save("hidden_size.onnx", "GRU", 3, {"hidden_size": H + 1})
save("activation.onnx", "LSTM", 4, {"hidden_size": H, "activations": ["Sigmoid", "Tanh", "Cosh"]})
save("w_shape.onnx", "LSTM", 4, {"hidden_size": H}, w_shape=(1, 4 * H, F + 1))
save("bidirectional_w.onnx", "GRU", 3, {"hidden_size": H, "direction": "bidirectional"})
save("rnn_direction.onnx", "RNN", 1, {"hidden_size": H, "direction": "both"})
save("rnn_activation_count.onnx", "RNN", 1, {"hidden_size": H, "activations": ["Tanh", "Tanh"]})
save("rnn_hidden_size.onnx", "RNN", 1, {"hidden_size": H - 1})
save("rnn_lens_input.onnx", "RNN", 1, {"hidden_size": H}, extra_inputs=["lens"],
     inputs=[h.make_tensor_value_info("x", TP.FLOAT, [T, N, F]), h.make_tensor_value_info("lens", TP.INT32, [N])])
save("lens_input.onnx", "LSTM", 4, {"hidden_size": H}, extra_inputs=["lens"],
     inputs=[h.make_tensor_value_info("x", TP.FLOAT, [T, N, F]), h.make_tensor_value_info("lens", TP.INT32, [N])])
save("lens_range.onnx", "GRU", 3, {"hidden_size": H}, extra_inputs=["lens"],
     extra_inits=[numpy_helper.from_array(np.array([3, 4], dtype=np.int32), "lens")])
save("initial_h_shape.onnx", "LSTM", 4, {"hidden_size": H}, extra_inputs=["", "h0"],
     extra_inits=[t("h0", rng.standard_normal((1, N + 1, H)))])
# Valid but not modelled: a ReLU activation is opaque (the audit stays sound).
save("relu.onnx", "RNN", 1, {"hidden_size": H, "activations": ["Relu"]})
save("gru_hard_sigmoid.onnx", "GRU", 3, {"hidden_size": H, "activations": ["HardSigmoid", "Tanh"]})
# The defaults written out, as PyTorch and tf2onnx write them: modelled.
save("lstm_defaults.onnx", "LSTM", 4, {"hidden_size": H, "activations": ["Sigmoid", "Tanh", "Tanh"]})
save("gru_defaults.onnx", "GRU", 3, {"hidden_size": H, "activations": ["Sigmoid", "Tanh"]})
save("rnn_defaults.onnx", "RNN", 1, {"hidden_size": H, "activations": ["Tanh"], "direction": "reverse"})
PY

bad_case() {  # NAME FILE PATTERN
  run "$1: import" 2 "$LNV" import "$T/$2" -o "$T/$2.json"
  has "$1: names the node and the fault" "$3"
  absent "$1: nothing written" "$T/$2.json"
  run "$1: audit" 2 "$LNV" audit "$T/$2"
}
bad_case "unknown direction" direction.onnx "node 'bad_lstm' \(LSTM\).*direction 'sideways'"
bad_case "hidden_size mismatch" hidden_size.onnx "node 'bad_gru' \(GRU\).*hidden_size 6 does not fit W"
bad_case "unknown activation" activation.onnx "node 'bad_lstm' \(LSTM\).*activation 'Cosh'"
bad_case "W of the wrong input size" w_shape.onnx "node 'bad_lstm' \(LSTM\).*input W"
bad_case "W of one direction, bidirectional" bidirectional_w.onnx "node 'bad_gru' \(GRU\).*input W"
bad_case "RNN direction" rnn_direction.onnx "node 'bad_rnn' \(RNN\).*direction 'both'"
bad_case "RNN activations for two directions, forward" rnn_activation_count.onnx \
  "node 'bad_rnn' \(RNN\).*activations has 2 entries, expected 1"
bad_case "RNN hidden_size mismatch" rnn_hidden_size.onnx "node 'bad_rnn' \(RNN\).*hidden_size 4 does not fit W"
bad_case "RNN sequence_lens a graph input" rnn_lens_input.onnx "node 'bad_rnn' \(RNN\).*sequence_lens .* is not a constant"
bad_case "sequence_lens a graph input" lens_input.onnx "node 'bad_lstm' \(LSTM\).*sequence_lens .* is not a constant"
bad_case "sequence_lens beyond seq_length" lens_range.onnx "node 'bad_gru' \(GRU\).*sequence_lens .* holds 4"
bad_case "initial_h of the wrong shape" initial_h_shape.onnx "node 'bad_lstm' \(LSTM\).*initial_h"
run "a ReLU RNN: audit" 0 "$LNV" audit "$T/relu.onnx"
run "a ReLU RNN: import" 0 "$LNV" import "$T/relu.onnx" -o "$T/relu.json"
grep -q '"op": "opaque"' "$T/relu.json" && ok "a ReLU RNN is opaque" || bad "a ReLU RNN is not opaque"
grep -q '"bad_rnn": "activations Relu (modelled: the defaults, Tanh per direction)"' "$T/relu.json" &&
  ok "the reason names the activation" || bad "the reason does not name Relu"
run "a HardSigmoid GRU: import" 0 "$LNV" import "$T/gru_hard_sigmoid.onnx" -o "$T/gru_hs.json"
grep -q '"bad_gru": "activations HardSigmoid, Tanh (modelled: the defaults, Sigmoid, Tanh per direction)"' \
  "$T/gru_hs.json" && ok "a HardSigmoid GRU is opaque, naming it" || bad "a HardSigmoid GRU: no reason naming it"
for m in lstm_defaults:lstm gru_defaults:gru rnn_defaults:rnn; do
  run "${m%%:*}: import" 0 "$LNV" import "$T/${m%%:*}.onnx" -o "$T/${m%%:*}.json"
  grep -q "\"op\": \"${m##*:}\"" "$T/${m%%:*}.json" && ! grep -q '"op": "opaque"' "$T/${m%%:*}.json" &&
    ok "${m%%:*}: the defaults written out are modelled" || bad "${m%%:*}: not imported as ${m##*:}"
done
finish
