#pragma once
// printf-style strings for the prose and tables that bench, the walkthrough and
// the step-time summaries print.

#include <string>

namespace fanout::presentation {

std::string strf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string ms(double seconds);  // "1.23 ms"

}  // namespace fanout::presentation
