#pragma once
// Checks on the SVG and HTML that apps/presentation writes, for the tests: tags
// balanced and attributes quoted (a small XML checker; HTML void elements
// allowed), every coordinate finite, attribute values and element texts pulled
// out by name.

#include <string>
#include <vector>

namespace fanout::test {

// "" when `text` is well formed (every element closed in order, attributes quoted,
// '&' only as an entity), else the first problem and its offset.
std::string xml_problem(const std::string& text);

// How many times `part` occurs in `text`.
int count_of(const std::string& text, const std::string& part);

// Values of attribute `name` on every element `tag` ("path", "rect"), in order.
std::vector<std::string> attr_values(const std::string& text, const std::string& tag,
                                     const std::string& name);

// The numbers in `text` ("M10.5 3 L4 5" -> 10.5, 3, 4, 5).
std::vector<double> numbers_in(const std::string& text);

// Whether a coordinate or size attribute holds "nan" or "inf" (any case).
bool has_non_finite_coordinate(const std::string& svg);

// The texts of elements <text class='CLASS' ...>...</text>, in order.
std::vector<std::string> texts_of_class(const std::string& svg, const std::string& cls);

}  // namespace fanout::test
