// Graphviz's `dot` program, run as a child process: DOT text in on stdin, SVG out on
// stdout. Graphviz is an optional runtime dependency (Debian's `graphviz`); only the HTML
// report needs it.
#pragma once

#include <string>

namespace lnv::report {

// The path of the `dot` executable found on PATH, or "" when there is none.
std::string find_dot();

// Renders `dot_text` as SVG (the <svg> element, without the XML prolog). Throws
// ModelError at `option` when `dot` is not on PATH (an environment the command line
// cannot be served in: exit 2, docs/spec/decisions.md) and InternalError when `dot`
// rejects the text or dies.
std::string render_svg(const std::string& dot_text, const std::string& option);

}  // namespace lnv::report
