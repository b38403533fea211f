// A minimal XML reader for topology files (NCCL's NCCL_TOPO_FILE format):
// elements and attributes only. Text content, comments, the <?xml?> prolog
// and <!DOCTYPE> are skipped; namespaces, CDATA and DTD entities are not
// supported.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace loom::xml {

// One element with its attributes (in document order) and child elements.
// A plain tree value; owns its children.
struct Element {
  std::string name;
  std::vector<std::pair<std::string, std::string>> attrs;
  std::vector<Element> children;
  int line = 0;  // where the start tag is, for error messages

  // The value of attribute `key`, or nullptr.
  const std::string* Attr(std::string_view key) const;
};

// Parses a document with one root element. The five predefined entities
// and numeric character references are decoded in attribute values.
// InvalidArgument with the line of the first error; nesting deeper than 64
// is refused.
Result<Element> Parse(std::string_view text);

}  // namespace loom::xml
