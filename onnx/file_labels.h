// Which node of an ONNX file computes an lnv node. The importer names the lnv nodes it
// makes from one ONNX node after that node's label (its name, or its first output when it
// has none): the label itself, or the label followed by '.' or ':' and more. So the file's
// node labelled L computes lnv node N (as the file spells N) when N == L or N starts with
// "L." or "L:". The importer's list of fused producers and the fold writer's search for a
// moved bias' reader both ask it here.
#pragma once

#include <string>
#include <vector>

namespace lnv::onnx_import {

// The labels L for which the file's node labelled L computes lnv node `name`: `name`
// itself first, then each prefix of it that a '.' or ':' follows, shortest first.
std::vector<std::string> labels_computing(const std::string& name);

}  // namespace lnv::onnx_import
