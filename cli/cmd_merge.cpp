// `lnverify merge REPORT... -o OUT.json [--junit OUT.xml]`: the reports of a campaign run
// as shards (`fuzz --shard K/N --json F --junit X`, `check --models LIST --shard K/N
// --json F --junit X`) combined into the reports of the whole campaign
// (reports/shard_merge.h): the shards' --json files into OUT.json, and with --junit their
// JUnit files, given among the REPORTs, into OUT.xml. The inputs may come in any order.
//
// Exit codes: those of the merged campaign (0 holds; 1 a case or model fails; 3 a model
// is inconclusive, check lists only), 2 when the inputs are not the shards of one
// campaign, each once.
#include <iostream>

#include "cli/command.h"
#include "cli/output_paths.h"
#include "core/error.h"
#include "core/file_io.h"
#include "reports/shard_merge.h"

namespace lnv::cli {
namespace {

// Whether the text is XML (a JUnit file) rather than JSON.
bool is_xml(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  return first != std::string::npos && text[first] == '<';
}

Action setup(CLI::App& sub) {
  struct State {
    std::vector<std::string> inputs;
    std::string out, junit;
  };
  auto st = std::make_shared<State>();
  sub.add_option("REPORT", st->inputs,
                 "the shards' --json reports, and with --junit their JUnit files")
      ->required();
  sub.add_option("-o,--output", st->out, "where to write the merged JSON report")->required();
  sub.add_option("--junit", st->junit, "also merge the JUnit files among the REPORTs into FILE");
  return [st]() -> int {
    std::vector<report::ShardFile> shards;
    std::vector<report::JunitFile> junit;
    for (const std::string& in : st->inputs) {
      for (const std::string* out : {&st->out, &st->junit})
        if (!out->empty() && same_file(in, *out))
          throw ModelError(*out, "'" + in + "' is an input report; choose another path");
      const std::string text = read_file(in);
      if (is_xml(text)) {
        if (st->junit.empty())
          throw ModelError(in, "a JUnit file: give --junit OUT.xml to merge the JUnit files");
        junit.push_back({in, report::read_junit_xml(text, in)});
        continue;
      }
      try {
        shards.push_back({in, nlohmann::json::parse(text)});
      } catch (const nlohmann::json::parse_error& e) {
        throw ModelError(in, std::string("neither a JSON report nor JUnit XML: ") + e.what());
      }
    }
    if (shards.empty()) throw ModelError("REPORT", "no JSON report among the inputs: merge needs the shards' --json files");
    if (!st->junit.empty() && junit.size() != shards.size())
      throw ModelError("--junit", std::to_string(shards.size()) + " JSON reports but " +
                                      std::to_string(junit.size()) + " JUnit files: give one of each per shard");
    if (!st->junit.empty() && same_file(st->out, st->junit))
      throw ModelError("--junit", "'" + st->junit + "' is also the -o output");
    const nlohmann::json merged = report::merge_reports(shards);
    std::string junit_xml;
    if (!st->junit.empty()) junit_xml = report::junit_xml(report::merge_junit(shards, merged, junit));
    AtomicFileWriter json_file(st->out);
    json_file.write(merged.dump(2) + "\n");
    std::vector<AtomicFileWriter*> files{&json_file};
    std::optional<AtomicFileWriter> junit_file;
    if (!st->junit.empty()) {
      junit_file.emplace(st->junit);
      junit_file->write(junit_xml);
      files.push_back(&*junit_file);
    }
    commit_together(files);
    const std::string outcome = merged.at("outcome").get<std::string>();
    const nlohmann::json& counts = merged.at("counts");
    if (merged.at("format") == "lnverify.fuzz")
      std::cout << "merged " << shards.size() << " shard(s): " << merged.at("checked") << " cases, "
                << counts.at("fails") << " failing (" << counts.at("wrong_yes") << " wrong \"yes\", "
                << counts.at("over_cautious_no") << " over-cautious \"no\"), " << counts.at("inconclusive")
                << " inconclusive: " << outcome << "\n";
    else
      std::cout << "merged " << shards.size() << " shard(s): " << merged.at("models") << " models, "
                << counts.at("holds") << " hold, " << counts.at("fails") << " fail, "
                << counts.at("inconclusive") << " inconclusive: " << outcome << "\n";
    return outcome == "holds" ? kOk : outcome == "fails" ? kCheckFails : kInconclusive;
  };
}

const bool kRegistered = register_command(
    {"merge", "combine the reports of a campaign's shards (--shard K/N) into one", setup});

}  // namespace
}  // namespace lnv::cli
