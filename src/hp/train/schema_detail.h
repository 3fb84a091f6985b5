// Internals shared by schema.cpp and schema_io.cpp: YAML scalar parsing and formatting.
#pragma once

#include <cstdint>
#include <string>

namespace YAML {
class Node;
class Emitter;
}  // namespace YAML

namespace hp::train::detail {

// Shortest text that reads back as the same double ("0.1", "1e-08").
std::string format_number(double v);
// "null", "a mapping", "a list" or the quoted scalar, for "expected X, got Y".
std::string describe_node(const YAML::Node& n);
// Strict whole-scalar parses; false for a wrong type or trailing text.
bool parse_int(const YAML::Node& n, int64_t* out);
bool parse_float(const YAML::Node& n, double* out);
bool parse_bool(const YAML::Node& n, bool* out);
bool parse_string(const YAML::Node& n, std::string* out);
// Writes s, double-quoted when a reader would take it for null, a bool or a number.
void emit_string(YAML::Emitter& e, const std::string& s);

}  // namespace hp::train::detail
