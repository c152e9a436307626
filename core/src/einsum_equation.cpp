#include "strata/einsum_equation.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "strata/error.h"

namespace strata {

namespace {

bool isLetter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

// A term's letters and where its ellipsis stands (npos: none).
struct Term {
  std::string letters;
  std::size_t ellipsisAt = std::string::npos;
};

Term parseTerm(std::string_view text, std::string_view equation) {
  Term term;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (isLetter(c)) {
      term.letters.push_back(c);
    } else if (c == '.') {
      if (text.substr(i, 3) != "..." || term.ellipsisAt != std::string::npos)
        fail("Einsum equation '{}': '{}' has a '.' that is not one ellipsis '...'", equation, text);
      term.ellipsisAt = term.letters.size();
      i += 2;
    } else {
      fail("Einsum equation '{}': '{}' has the character '{}' (labels are letters)", equation, text, c);
    }
  }
  return term;
}

std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == sep) {
      parts.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  return parts;
}

std::string expand(const Term& term, std::string_view ellipsis) {
  if (term.ellipsisAt == std::string::npos)
    return term.letters;
  std::string out = term.letters.substr(0, term.ellipsisAt);
  out += ellipsis;
  out += term.letters.substr(term.ellipsisAt);
  return out;
}

}  // namespace

EinsumEquation parseEinsum(std::string_view equation, const std::vector<std::size_t>& ranks) {
  std::string compact;
  for (char c : equation) {
    if (!std::isspace(static_cast<unsigned char>(c)))
      compact.push_back(c);
  }
  const std::size_t arrow = compact.find("->");
  const bool explicitOutput = arrow != std::string::npos;
  const std::string_view lhs = std::string_view(compact).substr(0, explicitOutput ? arrow : compact.size());
  std::vector<Term> terms;
  for (std::string_view part : split(lhs, ','))
    terms.push_back(parseTerm(part, equation));
  if (terms.size() != ranks.size()) {
    fail("Einsum equation '{}' has {} operand term{} but the node has {} input{}", equation, terms.size(),
         terms.size() == 1 ? "" : "s", ranks.size(), ranks.size() == 1 ? "" : "s");
  }
  Term out;
  if (explicitOutput) {
    const std::string_view rhs = std::string_view(compact).substr(arrow + 2);
    if (rhs.find("->") != std::string_view::npos || rhs.find(',') != std::string_view::npos)
      fail("Einsum equation '{}': the output '{}' must be a single term", equation, rhs);
    out = parseTerm(rhs, equation);
  }
  // How many dims each ellipsis covers.
  std::size_t ellipsisDims = 0;
  for (std::size_t i = 0; i < terms.size(); ++i) {
    const Term& term = terms[i];
    const std::size_t named = term.letters.size();
    if (term.ellipsisAt == std::string::npos) {
      if (named != ranks[i]) {
        fail("Einsum equation '{}': operand {} has rank {} but its term '{}' labels {} dim{}", equation, i, ranks[i],
             term.letters, named, named == 1 ? "" : "s");
      }
    } else {
      if (named > ranks[i]) {
        fail("Einsum equation '{}': operand {} has rank {} but its term labels {} dims besides the ellipsis", equation,
             i, ranks[i], named);
      }
      ellipsisDims = std::max(ellipsisDims, ranks[i] - named);
    }
  }
  EinsumEquation parsed;
  std::string used;
  for (const Term& term : terms)
    used += term.letters;
  used += out.letters;
  for (char c : std::string("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")) {
    if (parsed.ellipsis.size() == ellipsisDims)
      break;
    if (used.find(c) == std::string::npos)
      parsed.ellipsis.push_back(c);
  }
  if (parsed.ellipsis.size() != ellipsisDims)
    fail("Einsum equation '{}': no letters are left to label the ellipsis's {} dims", equation, ellipsisDims);
  for (std::size_t i = 0; i < terms.size(); ++i) {
    const std::size_t covered = terms[i].ellipsisAt == std::string::npos ? 0 : ranks[i] - terms[i].letters.size();
    parsed.inputs.push_back(expand(terms[i], std::string_view(parsed.ellipsis).substr(ellipsisDims - covered)));
  }
  if (explicitOutput) {
    if (out.ellipsisAt == std::string::npos && ellipsisDims > 0) {
      fail("Einsum equation '{}': the operands' ellipsis covers {} dims but the output has no '...' for them", equation,
           ellipsisDims);
    }
    parsed.output = expand(out, parsed.ellipsis);
    for (std::size_t i = 0; i < out.letters.size(); ++i) {
      const char c = out.letters[i];
      if (out.letters.find(c) != i)
        fail("Einsum equation '{}': the output repeats '{}'", equation, c);
      const bool inInput = std::any_of(parsed.inputs.begin(), parsed.inputs.end(),
                                       [c](const std::string& in) { return in.find(c) != std::string::npos; });
      if (!inInput)
        fail("Einsum equation '{}': the output's '{}' is in no operand", equation, c);
    }
  } else {
    std::map<char, int> counts;
    for (const Term& term : terms) {
      for (char c : term.letters)
        ++counts[c];
    }
    parsed.output = parsed.ellipsis;
    for (const auto& [c, count] : counts) {  // std::map: ASCII order
      if (count == 1)
        parsed.output.push_back(c);
    }
  }
  return parsed;
}

std::string einsumString(const EinsumEquation& equation) {
  std::string text;
  for (std::size_t i = 0; i < equation.inputs.size(); ++i) {
    if (i > 0)
      text += ',';
    text += equation.inputs[i];
  }
  return text + "->" + equation.output;
}

std::map<char, std::int64_t> einsumLetterSizes(const EinsumEquation& equation, const std::vector<Shape>& shapes) {
  STRATA_CHECK(shapes.size() == equation.inputs.size(), "Einsum '{}': {} shapes for {} operands",
               einsumString(equation), shapes.size(), equation.inputs.size());
  std::map<char, std::int64_t> sizes;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const std::string& letters = equation.inputs[i];
    STRATA_CHECK(letters.size() == shapes[i].size(), "Einsum '{}': operand {} has shape {}", einsumString(equation), i,
                 shapeToString(shapes[i]));
    for (std::size_t d = 0; d < letters.size(); ++d) {
      const char c = letters[d];
      const std::int64_t size = shapes[i][d];
      const std::size_t first = letters.find(c);
      if (first != d && shapes[i][first] != size) {
        fail("Einsum '{}': operand {} of shape {} repeats '{}' over dims of sizes {} and {}", einsumString(equation), i,
             shapeToString(shapes[i]), c, shapes[i][first], size);
      }
      auto [it, inserted] = sizes.try_emplace(c, size);
      if (inserted || it->second == size || size == 1)
        continue;
      if (it->second == 1) {
        it->second = size;
        continue;
      }
      fail("Einsum '{}': '{}' has size {} in operand {} of shape {} but {} elsewhere (only 1 broadcasts)",
           einsumString(equation), c, size, i, shapeToString(shapes[i]), it->second);
    }
  }
  return sizes;
}

Shape einsumOutputShape(const EinsumEquation& equation, const std::vector<Shape>& shapes) {
  const std::map<char, std::int64_t> sizes = einsumLetterSizes(equation, shapes);
  Shape out;
  for (char c : equation.output)
    out.push_back(sizes.at(c));
  return out;
}

char unusedEinsumLetter(const EinsumEquation& equation, std::string_view alsoTaken) {
  std::string used = equation.output + std::string(alsoTaken);
  for (const std::string& in : equation.inputs)
    used += in;
  for (char c : std::string("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")) {
    if (used.find(c) == std::string::npos)
      return c;
  }
  fail("Einsum '{}': all 52 letters are taken", einsumString(equation));
}

}  // namespace strata
