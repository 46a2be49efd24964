// Reading a report lnverify wrote earlier (a baseline for the regression gate), and the
// --format option shared by the commands that print a report.
#pragma once

#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace lnv::cli {

// The JSON in `path`; ModelError naming the file when it cannot be read or is not JSON.
nlohmann::json read_json_report(const std::string& path);

// --format text|markdown on `sub`.
void add_format_option(CLI::App& sub, std::string& format);

}  // namespace lnv::cli
