#include "cli/report_files.h"

#include "core/error.h"
#include "core/file_io.h"

namespace lnv::cli {

nlohmann::json read_json_report(const std::string& path) {
  const std::string text = read_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw ModelError(path, std::string("not a JSON report: ") + e.what());
  }
}

void add_format_option(CLI::App& sub, std::string& format) {
  sub.add_option("--format", format,
                 "text (default) or markdown: the report on stdout as Markdown tables")
      ->check(CLI::IsMember({"text", "markdown"}));
}

}  // namespace lnv::cli
