#pragma once
// Storage: bytes on one device from its Allocator, tagged for accounting.
// Tensor: a contiguous view (dtype, shape, byte offset) into a shared Storage.
// Dim-0 slices and flat sub-views share storage: scatter and the flat parameter
// buffer's named views cost no copies. Data moves only through tensor_copy on a
// stream, between any two devices.

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/allocator.h"
#include "engine/core/check.h"
#include "engine/core/device.h"
#include "engine/core/dtype.h"

namespace fanout {

class Stream;

class Storage {
 public:
  Storage(Device device, size_t bytes, MemTag tag);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  MemTag tag() const { return tag_; }

 private:
  Device device_;
  size_t bytes_;
  MemTag tag_;
  void* data_;
};

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& shape);  // "[2, 3]"
int64_t shape_numel(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;  // undefined: no storage
  // Uninitialised memory on `device`.
  static Tensor empty(Shape shape, DType dtype, Device device, MemTag tag = MemTag::other);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const;
  const Shape& shape() const { return shape_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t d) const;
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  size_t byte_offset() const { return offset_; }

  void* raw() const;
  template <typename T>
  T* data() const {
    return static_cast<T*>(raw());
  }

  // Rows [begin, end) along dim 0, sharing storage.
  Tensor slice(int64_t begin, int64_t end) const;
  // `shape` elements starting `element_offset` elements into this tensor.
  Tensor view(int64_t element_offset, Shape shape) const;
  // Same elements, another shape (numel must match).
  Tensor reshape(Shape shape) const;

  std::string str() const;  // "f32[2, 3] on cpu:0"

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;  // bytes into storage
  DType dtype_ = DType::f32;
  Shape shape_;
};

// dst <- src (same dtype and numel), any two devices. CPU<->CPU copies run on a CPU
// stream; any copy involving a CUDA tensor runs on a CUDA stream.
void tensor_copy(Stream& stream, const Tensor& dst, const Tensor& src);

// rows x cols elements from src (rows src_ld apart) to dst (rows dst_ld apart):
// same dtype, same device (the stream's); each view holds (rows - 1) * ld + cols
// elements at least. CUDA: one cudaMemcpy2DAsync.
void tensor_copy_rows(Stream& stream, const Tensor& dst, int64_t dst_ld, const Tensor& src,
                      int64_t src_ld, int64_t rows, int64_t cols);

// Host helpers for tests and I/O: synchronise `stream` and move data.
Tensor tensor_from_host(Stream& stream, const void* data, Shape shape, DType dtype, Device device,
                        MemTag tag = MemTag::other);
void tensor_to_host(Stream& stream, const Tensor& src, void* out);
// dst <- host bytes (dst.nbytes() of them); returns once the copy is done.
void tensor_upload(Stream& stream, const Tensor& dst, const void* data);

template <typename T>
Tensor tensor_from_vector(Stream& stream, const std::vector<T>& values, Shape shape, DType dtype,
                          Device device, MemTag tag = MemTag::other) {
  FANOUT_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape),
               "tensor_from_vector: ", values.size(), " values for shape ", shape_str(shape));
  FANOUT_CHECK(sizeof(T) == dtype_size(dtype), "tensor_from_vector: element size mismatch");
  return tensor_from_host(stream, values.data(), std::move(shape), dtype, device, tag);
}

template <typename T>
std::vector<T> tensor_to_vector(Stream& stream, const Tensor& src) {
  FANOUT_CHECK(sizeof(T) == dtype_size(src.dtype()), "tensor_to_vector: element size mismatch");
  std::vector<T> out(static_cast<size_t>(src.numel()));
  tensor_to_host(stream, src, out.data());
  return out;
}

}  // namespace fanout
