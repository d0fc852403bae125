#include "engine/core/dtype.h"

#include "engine/core/check.h"

namespace fanout {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 4;
    case DType::bf16:
      return 2;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
    case DType::u16:
      return 2;
  }
  FANOUT_ASSERT(false, "unknown dtype");
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::bf16:
      return "bf16";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::u16:
      return "u16";
  }
  return "?";
}

}  // namespace fanout
