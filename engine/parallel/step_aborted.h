#pragma once
// StepAborted: thrown at a device's thread that waited on another device which
// failed the step (a zero2/zero3 replica waiting for room, a pipeline stage
// waiting for its input): the other failure is the one to report.

#include "engine/core/check.h"

namespace fanout::parallel {

class StepAborted : public Error {
 public:
  using Error::Error;
};

}  // namespace fanout::parallel
