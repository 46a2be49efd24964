// ONNX's LSTM, GRU and RNN nodes as model.json ops (onnx/import_recurrent.cpp).
#pragma once

#include <cstddef>

#include "onnx/import_context.h"

namespace lnv::onnx_import {

void map_gated_recurrent(Importer& im, const onnx_import::Node& n, size_t i);
void map_onnx_rnn(Importer& im, const onnx_import::Node& n, size_t i);

}  // namespace lnv::onnx_import
