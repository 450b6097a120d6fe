// src/io/safetensors.cc — safetensors reader and writer (see tfm/io/safetensors.h for the format
// and the contracts). Reading is three passes over untrusted bytes: (1) the length prefix and the
// JSON header, parsed with a callback that rejects duplicate keys and deep nesting; (2) each entry's
// dtype, shape and data_offsets, checked on their own; (3) all byte ranges together, which must
// tile the data buffer. Only then are bytes converted into tensors (or, in zero-copy mode, aligned
// F32 ranges wrapped in place).
//
// To add a dtype: one row in kDTypes (name, element size, converter) and a converter below.
#include "tfm/io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "io/file_util.h"
#include "io/safetensors_writer.h"
#include "quote.h"
#include "tensor_impl.h"

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; tfm reads it in place on little-endian CPUs only");

namespace tfm::io {
namespace {

using ordered_json = nlohmann::ordered_json;  // keeps header order for SafeTensorsFile::tensors

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit
constexpr int kMaxJsonDepth = 4;    // legit headers reach depth 3: {} -> entry {} -> shape [] -> dim
constexpr int64_t kMaxExactInt = int64_t{1} << 24;  // Float32 has a 24-bit significand

std::string snippet(const ordered_json& j) {
  std::string s = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > kMaxQuoted) s = s.substr(0, kMaxQuoted) + "...";
  return s;
}

const char* json_kind(const ordered_json& j) {
  if (j.is_number_float()) return "non-integer number";
  if (j.is_number_integer()) return "integer";
  return j.type_name();  // "object", "array", "string", "boolean", "null"
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw SafeTensorsError(path + ": " + what);
}

// ---- dtype table ----------------------------------------------------------------------------------
// Converters read n little-endian elements from src (unaligned) into dst. They return the flat
// index of the first element that cannot be represented, or -1; *bad receives its text.
using Converter = int64_t (*)(const uint8_t* src, int64_t n, void* dst, std::string* bad);

int64_t convert_f32(const uint8_t* src, int64_t n, void* dst, std::string*) {
  std::memcpy(dst, src, static_cast<size_t>(n) * 4);
  return -1;
}

// IEEE binary16 -> binary32, exact for every input (subnormals, ±0, ±inf, NaN payloads kept):
//   normal:    (-1)^s · 2^(e−15) · 1.m  -> exponent rebiased by 127−15, mantissa shifted by 13
//   subnormal: (-1)^s · m · 2^−24      (exact in Float32: m < 2^10 and 2^−24 is a normal float)
float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h >> 15) << 31;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  if (exp == 0) {
    const float mag = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -mag : mag;
  }
  const uint32_t bits = exp == 31 ? (sign | 0x7f800000u | (mant << 13))
                                  : (sign | ((exp + 127 - 15) << 23) | (mant << 13));
  return std::bit_cast<float>(bits);
}

int64_t convert_f16(const uint8_t* src, int64_t n, void* dst, std::string*) {
  float* out = static_cast<float*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    out[i] = half_to_float(h);
  }
  return -1;
}

// bfloat16 is the top half of a binary32: widening is a 16-bit shift, exact.
int64_t convert_bf16(const uint8_t* src, int64_t n, void* dst, std::string*) {
  float* out = static_cast<float*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    out[i] = std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
  }
  return -1;
}

// binary64 -> binary32 rounds to nearest even; a finite value that rounds to ±inf is refused.
int64_t convert_f64(const uint8_t* src, int64_t n, void* dst, std::string* bad) {
  float* out = static_cast<float*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    double d;
    std::memcpy(&d, src + 8 * i, 8);
    const float f = static_cast<float>(d);
    if (std::isinf(f) && std::isfinite(d)) {
      std::ostringstream os;
      os.precision(17);
      os << d << ", beyond the Float32 range (±3.4028235e+38)";
      *bad = os.str();
      return i;
    }
    out[i] = f;
  }
  return -1;
}

// Integers -> Float32, refusing |v| > 2^24 (beyond it Float32 skips integers, e.g. 2^24 + 1).
template <class T>
int64_t convert_int(const uint8_t* src, int64_t n, void* dst, std::string* bad) {
  float* out = static_cast<float*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, src + sizeof(T) * i, sizeof(T));
    bool ok;
    if constexpr (std::is_signed_v<T>) {
      ok = static_cast<int64_t>(v) >= -kMaxExactInt && static_cast<int64_t>(v) <= kMaxExactInt;
    } else {
      ok = static_cast<uint64_t>(v) <= static_cast<uint64_t>(kMaxExactInt);
    }
    if (!ok) {
      *bad = std::to_string(v) + ", not exactly representable in Float32 (|v| > 2^24)";
      return i;
    }
    out[i] = static_cast<float>(v);
  }
  return -1;
}

int64_t convert_bool(const uint8_t* src, int64_t n, void* dst, std::string* bad) {
  uint8_t* out = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    if (src[i] > 1) {
      *bad = "byte " + std::to_string(src[i]) + ", expected 0 or 1";
      return i;
    }
    out[i] = src[i];
  }
  return -1;
}

struct DTypeInfo {
  const char* name;  // safetensors spelling
  uint64_t size;     // bytes per element
  DType target;      // tfm dtype it loads as
  Converter convert;
};

constexpr DTypeInfo kDTypes[] = {
    {"F32", 4, DType::FLOAT32, convert_f32},
    {"F16", 2, DType::FLOAT32, convert_f16},
    {"BF16", 2, DType::FLOAT32, convert_bf16},
    {"F64", 8, DType::FLOAT32, convert_f64},
    {"I8", 1, DType::FLOAT32, convert_int<int8_t>},
    {"I16", 2, DType::FLOAT32, convert_int<int16_t>},
    {"I32", 4, DType::FLOAT32, convert_int<int32_t>},
    {"I64", 8, DType::FLOAT32, convert_int<int64_t>},
    {"U8", 1, DType::FLOAT32, convert_int<uint8_t>},
    {"U16", 2, DType::FLOAT32, convert_int<uint16_t>},
    {"U32", 4, DType::FLOAT32, convert_int<uint32_t>},
    {"U64", 8, DType::FLOAT32, convert_int<uint64_t>},
    {"BOOL", 1, DType::BOOL, convert_bool},
};

const DTypeInfo* find_dtype(const std::string& name) {
  for (const DTypeInfo& d : kDTypes)
    if (name == d.name) return &d;
  return nullptr;
}

std::string supported_dtypes() {
  std::string s;
  for (const DTypeInfo& d : kDTypes) s += (s.empty() ? "" : ", ") + std::string(d.name);
  return s;
}

// ---- header parsing -------------------------------------------------------------------------------
// nlohmann keeps the last of duplicate keys silently; this callback tracks the keys of every open
// object and throws on a repeat, naming the path of keys down to it. It also caps nesting.
class HeaderGuard {
 public:
  explicit HeaderGuard(const std::string& path) : path_(path) {}

  bool operator()(int depth, ordered_json::parse_event_t event, ordered_json& parsed) {
    using E = ordered_json::parse_event_t;
    if (depth > kMaxJsonDepth)
      fail(path_, "header is nested deeper than " + std::to_string(kMaxJsonDepth) +
                      " levels; a safetensors header is {name: {dtype, shape: [..], data_offsets}}");
    switch (event) {
      case E::object_start:
        open_.push_back({});
        break;
      case E::object_end:
        if (!open_.empty()) open_.pop_back();
        break;
      case E::key: {
        Frame& f = open_.back();
        f.last_key = parsed.get<std::string>();
        if (!f.keys.insert(f.last_key).second) {
          if (open_.size() == 1)
            fail(path_, "duplicate tensor name " + quote_name(f.last_key) + " in header");
          std::string where;
          for (size_t i = 0; i + 1 < open_.size(); ++i)
            where += (i ? "." : "") + open_[i].last_key;
          fail(path_, "entry " + quote_name(where) + ": duplicate key " + quote_name(f.last_key));
        }
        break;
      }
      default:
        break;
    }
    return true;
  }

 private:
  struct Frame {
    std::set<std::string> keys;
    std::string last_key;
  };
  std::string path_;
  std::vector<Frame> open_;
};

// A non-negative JSON integer that fits int64, else an error naming the entry and field.
int64_t read_count(const std::string& path, const std::string& what, const ordered_json& j) {
  if (!j.is_number_integer())
    fail(path, what + " must be a non-negative integer, got " + json_kind(j) + " " + snippet(j));
  if (!j.is_number_unsigned())
    fail(path, what + " must be non-negative, got " + snippet(j));
  const uint64_t v = j.get<uint64_t>();
  if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    fail(path, what + " = " + std::to_string(v) + " exceeds 2^63 - 1");
  return static_cast<int64_t>(v);
}

// "[begin, end]". Built by appending: GCC 12 warns falsely (-Wrestrict, PR105651) on
// "[" + std::to_string(..) chains.
std::string range_str(uint64_t begin, uint64_t end) {
  std::string s = "[";
  s += std::to_string(begin);
  s += ", ";
  s += std::to_string(end);
  s += "]";
  return s;
}

struct Entry {
  std::string name;
  const DTypeInfo* dtype = nullptr;
  Shape shape;
  int64_t numel = 0;
  uint64_t begin = 0, end = 0;  // byte range in the data buffer
};

// Checks one header entry on its own: types, dtype, shape, offsets inside the buffer, byte count.
Entry parse_entry(const std::string& path, const std::string& name, const ordered_json& j,
                  uint64_t buffer_size) {
  const std::string who = "tensor " + quote_name(name);
  if (!j.is_object())
    fail(path, who + ": entry must be an object {dtype, shape, data_offsets}, got " +
                   json_kind(j) + " " + snippet(j));
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!j.contains(key)) fail(path, who + ": missing \"" + key + "\" in " + snippet(j));

  Entry e;
  e.name = name;
  const ordered_json& jd = j.at("dtype");
  if (!jd.is_string()) fail(path, who + ": dtype must be a string, got " + snippet(jd));
  const std::string dname = jd.get<std::string>();
  e.dtype = find_dtype(dname);
  if (e.dtype == nullptr)
    fail(path, who + ": unsupported dtype " + quote_name(dname) + " (supported: " + supported_dtypes() +
                   ")");

  const ordered_json& js = j.at("shape");
  if (!js.is_array()) fail(path, who + ": shape must be an array, got " + snippet(js));
  // Far above any tensor a model holds (PyTorch's own kernels stop at 25 dimensions); it keeps a shape's
  // text, which messages quote, a line long.
  constexpr size_t kMaxRank = 64;
  if (js.size() > kMaxRank)
    fail(path, who + ": shape has " + std::to_string(js.size()) + " dimensions, more than " + std::to_string(kMaxRank));
  for (size_t d = 0; d < js.size(); ++d)
    e.shape.push_back(read_count(path, who + ": shape[" + std::to_string(d) + "]", js[d]));
  // numel and numel × element size must both fit int64 (Tensor sizes). A 0 dim anywhere makes the
  // tensor empty whatever the other dims are, so it is looked for before multiplying.
  uint64_t numel = 1, nbytes = 0;
  bool overflow = false;
  if (std::find(e.shape.begin(), e.shape.end(), 0) != e.shape.end()) {
    numel = 0;
  } else {
    for (const int64_t n : e.shape)
      overflow = overflow || __builtin_mul_overflow(numel, static_cast<uint64_t>(n), &numel);
  }
  if (overflow || numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
      __builtin_mul_overflow(numel, e.dtype->size, &nbytes) ||
      nbytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    fail(path, who + ": shape " + snippet(js) + " overflows: its " + e.dtype->name +
                   " byte size does not fit in 63 bits");
  e.numel = static_cast<int64_t>(numel);

  const ordered_json& jo = j.at("data_offsets");
  if (!jo.is_array() || jo.size() != 2)
    fail(path, who + ": data_offsets must be [begin, end], got " + snippet(jo));
  e.begin = static_cast<uint64_t>(read_count(path, who + ": data_offsets[0]", jo[0]));
  e.end = static_cast<uint64_t>(read_count(path, who + ": data_offsets[1]", jo[1]));
  const std::string range = range_str(e.begin, e.end);
  if (e.begin > e.end)
    fail(path, who + ": data_offsets " + range + " have begin > end");
  if (e.end > buffer_size)
    fail(path, who + ": data_offsets " + range + " end past the data buffer, which holds " +
                   std::to_string(buffer_size) + " bytes");
  if (e.end - e.begin != nbytes)
    fail(path, who + ": data_offsets " + range + " give " + std::to_string(e.end - e.begin) +
                   " bytes, expected " + std::to_string(nbytes) + " (" + e.dtype->name + " × " +
                   shape_str(e.shape) + ")");
  return e;
}

// The ranges must tile [0, buffer_size): sorted by (begin, end), each starts where the previous
// ended. Anything else is an overlap, a hole, or trailing bytes.
void check_tiling(const std::string& path, std::vector<const Entry*> order, uint64_t buffer_size) {
  std::sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t cursor = 0;
  const Entry* prev = nullptr;
  auto range = [](const Entry* e) { return range_str(e->begin, e->end); };
  for (const Entry* e : order) {
    if (e->begin < cursor)
      fail(path, "tensor " + quote_name(e->name) + ": data_offsets " + range(e) + " overlap tensor " +
                     quote_name(prev->name) + " " + range(prev));
    if (e->begin > cursor)
      fail(path, "data buffer bytes [" + std::to_string(cursor) + ", " + std::to_string(e->begin) +
                     ") belong to no tensor (hole before tensor " + quote_name(e->name) + " " +
                     range(e) + ")");
    cursor = e->end;
    prev = e;
  }
  if (cursor != buffer_size)
    fail(path, "data buffer holds " + std::to_string(buffer_size) + " bytes but the tensors cover " +
                   std::to_string(cursor) + " (" + std::to_string(buffer_size - cursor) +
                   " trailing bytes belong to no tensor)");
}

// `keeper` is the mapping shared with zero-copy tensors; null in copying mode. read_only: keeper is a
// ReadOnly mapping, whose views are file pages (tensor_from_borrowed).
SafeTensorsFile load_mapped(const std::string& path, const MappedFile& file, const std::shared_ptr<MappedFile>& keeper,
                            bool keep_int8, bool read_only) {
  const uint64_t file_size = file.size();
  if (file_size < 8)
    fail(path, "file is " + std::to_string(file_size) +
                   " bytes, shorter than the 8-byte header length prefix");
  uint64_t header_len;
  std::memcpy(&header_len, file.data(), 8);  // little-endian u64 (static_assert above)
  if (header_len > kMaxHeaderBytes)
    fail(path, "header length " + std::to_string(header_len) + " exceeds the limit of " +
                   std::to_string(kMaxHeaderBytes) + " bytes");
  if (header_len > file_size - 8)
    fail(path, "header length " + std::to_string(header_len) + " exceeds the " +
                   std::to_string(file_size - 8) + " bytes after the length prefix (truncated file?)");
  const char* hbegin = reinterpret_cast<const char*>(file.data() + 8);
  const uint8_t* buffer = file.data() + 8 + header_len;
  const uint64_t buffer_size = file_size - 8 - header_len;

  // nlohmann stops reading at a NUL byte, which would leave whatever follows it unread: refused.
  if (const void* nul = std::memchr(hbegin, '\0', header_len))
    fail(path, "header holds a NUL byte at offset " + std::to_string(static_cast<const char*>(nul) - hbegin) +
                   " of its " + std::to_string(header_len));
  ordered_json header;
  {
    HeaderGuard guard(path);
    try {
      header = ordered_json::parse(hbegin, hbegin + header_len, std::ref(guard));
    } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for 1e400
      fail(path, std::string("header is not valid JSON: ") + escape_text(e.what(), kMaxMessage));
    }
  }
  if (!header.is_object())
    fail(path, std::string("header must be a JSON object, got ") + json_kind(header) + " " +
                   snippet(header));

  SafeTensorsFile out;
  out.path = path;
  std::vector<Entry> entries;
  entries.reserve(header.size());
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object())
        fail(path, "__metadata__ must be an object {str: str}, got " + std::string(json_kind(*it)) +
                       " " + snippet(*it));
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string())
          fail(path, "__metadata__ key " + quote_name(m.key()) + ": value must be a string, got " +
                         json_kind(*m) + " " + snippet(*m));
        out.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(path, it.key(), *it, buffer_size));
  }
  std::vector<const Entry*> order;
  for (const Entry& e : entries) order.push_back(&e);
  check_tiling(path, order, buffer_size);

  for (const Entry& e : entries) {
    // Zero-copy: F32 bytes are the Float32 values already (little-endian, static_assert above);
    // only alignment can stop a view. Empty tensors have no bytes to share.
    if (keeper && e.dtype->convert == convert_f32 && e.numel > 0) {
      // A read-only mapping's bytes are never written through (LoadOptions::read_only): the cast only
      // fits Tensor's pointer type.
      uint8_t* at = (read_only ? const_cast<uint8_t*>(keeper->data()) : keeper->mutable_data()) +
                    (buffer - file.data()) + e.begin;
      if (reinterpret_cast<uintptr_t>(at) % alignof(float) == 0) {
        out.tensors.insert(e.name, read_only ? tensor_from_borrowed(e.shape, DType::FLOAT32, at, keeper,
                                                                    /*file_pages=*/true)
                                             : Tensor::from_external(e.shape, reinterpret_cast<float*>(at), keeper));
        out.dtypes.emplace(e.name, e.dtype->name);
        out.mapped.insert(e.name);
        continue;
      }
    }
    if (keep_int8 && std::string_view(e.dtype->name) == "I8") {
      Int8Tensor t;
      t.shape = e.shape;
      if (read_only) {  // a view: its pages read when used
        t.view = reinterpret_cast<const int8_t*>(buffer + e.begin);
        t.keeper = keeper;
      } else {
        t.data.resize(static_cast<size_t>(e.numel));
        if (e.numel > 0) std::memcpy(t.data.data(), buffer + e.begin, static_cast<size_t>(e.numel));
      }
      out.int8.emplace(e.name, std::move(t));
      out.dtypes.emplace(e.name, e.dtype->name);
      continue;
    }
    Tensor t = Tensor::empty(e.shape, e.dtype->target);
    if (e.numel > 0) {
      void* dst = e.dtype->target == DType::BOOL ? static_cast<void*>(t.data_bool())
                                                 : static_cast<void*>(t.data());
      std::string bad;
      const int64_t at = e.dtype->convert(buffer + e.begin, e.numel, dst, &bad);
      if (at >= 0)
        fail(path, "tensor " + quote_name(e.name) + ": element " + std::to_string(at) + " of " +
                       e.dtype->name + " " + shape_str(e.shape) + " is " + bad);
    }
    out.tensors.insert(e.name, std::move(t));
    out.dtypes.emplace(e.name, e.dtype->name);
  }
  return out;
}

}  // namespace

const Tensor& SafeTensorsFile::at(const std::string& name) const {
  const auto it = tensors.find(name);
  if (it != tensors.end()) return it->second;
  std::string list;
  const size_t shown = std::min<size_t>(tensors.size(), 10);
  size_t i = 0;
  for (auto t = tensors.begin(); i < shown; ++t, ++i) list += (i ? ", " : "") + t->first;
  if (tensors.size() > shown) list += ", ...";
  fail(path, "no tensor " + quote_name(name) + " (file has " + std::to_string(tensors.size()) +
                 " tensors" + (tensors.empty() ? "" : ": " + list) + ")");
}

bool SafeTensorsFile::contains(const std::string& name) const { return tensors.contains(name); }

SafeTensorsFile load_safetensors(const std::string& path) { return load_safetensors(path, LoadOptions{}); }

SafeTensorsFile load_safetensors(const std::string& path, const LoadOptions& options) {
  try {
    if (!options.zero_copy) {
      const MappedFile file(path);
      return load_mapped(path, file, nullptr, options.keep_int8, false);
    }
    const auto file = std::make_shared<MappedFile>(
        path, options.read_only ? MappedFile::Access::ReadOnly : MappedFile::Access::CopyOnWrite);
    return load_mapped(path, *file, file, options.keep_int8, options.read_only);
  } catch (const IoError& e) {
    throw SafeTensorsError(e.what());  // already "<path>: <call> failed: <errno text>"
  }
}

void write_safetensors(AtomicFileWriter& w, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata,
                       const std::map<std::string, Int8Tensor>& int8) {
  const std::string& path = w.path();
  for (const auto& [name, t] : int8) {
    const std::string who = "tensor " + quote_name(name);
    if (name == "__metadata__") fail(path, who + ": the name is reserved for the metadata");
    if (tensors.contains(name)) fail(path, who + ": given both as a tensor and as an int8 tensor");
    int64_t n = 1;
    for (const int64_t d : t.shape) n *= d;
    if (!t.view && n != static_cast<int64_t>(t.data.size()))  // a view holds its shape's values
      fail(path, who + ": " + std::to_string(t.data.size()) + " int8 values for shape " + shape_str(t.shape));
  }
  // Validate everything before touching the file system (names are unique by NamedTensors' rule).
  for (const auto& [name, t] : tensors) {
    const std::string who = "tensor " + quote_name(name);
    if (name == "__metadata__") fail(path, who + ": the name is reserved for the metadata");
    if (!t.defined()) fail(path, who + ": undefined tensor");
    if (t.dtype() != DType::FLOAT32 && t.dtype() != DType::BOOL)
      fail(path, who + ": unsupported dtype " + dtype_name(t.dtype()));
  }
  // Reference order: larger dtype alignment first (F32 before BOOL), then by name.
  std::vector<const NamedTensors::value_type*> order;
  for (const auto& p : tensors) order.push_back(&p);
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    const bool af = a->second.dtype() == DType::FLOAT32, bf = b->second.dtype() == DType::FLOAT32;
    return af != bf ? af : a->first < b->first;
  });

  ordered_json header = ordered_json::object();
  if (!metadata.empty()) {
    ordered_json m = ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  uint64_t offset = 0;
  // One-byte tensors (BOOL and I8) after F32, by name.
  std::vector<std::pair<std::string, const Int8Tensor*>> bytes_order;
  for (const auto* p : order)
    if (p->second.dtype() != DType::FLOAT32) bytes_order.emplace_back(p->first, nullptr);
  for (const auto& [name, t] : int8) bytes_order.emplace_back(name, &t);
  std::sort(bytes_order.begin(), bytes_order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  auto add_entry = [&](const std::string& name, const char* dtype, const Shape& shape, uint64_t nbytes) {
    ordered_json e = ordered_json::object();
    e["dtype"] = dtype;
    e["shape"] = shape;
    e["data_offsets"] = {offset, offset + nbytes};
    header[name] = std::move(e);
    offset += nbytes;
  };
  for (const auto* p : order)
    if (p->second.dtype() == DType::FLOAT32)
      add_entry(p->first, "F32", p->second.shape(), static_cast<uint64_t>(p->second.numel()) * 4);
  for (const auto& [name, t8] : bytes_order) {
    if (t8) {
      add_entry(name, "I8", t8->shape, t8->data.size());
    } else {
      const Tensor& t = tensors.at(name);
      add_entry(name, "BOOL", t.shape(), static_cast<uint64_t>(t.numel()));
    }
  }
  std::string text;
  try {
    text = header.dump();  // compact, like the reference
  } catch (const nlohmann::json::type_error& e) {  // a name or metadata string is not UTF-8
    fail(path, std::string("cannot encode header: ") + escape_text(e.what(), kMaxMessage));
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // data buffer starts 8-aligned

  try {
    const uint64_t n = text.size();
    w.write(&n, 8);  // little-endian u64 (static_assert above)
    w.write(text.data(), text.size());
    for (const auto* p : order) {
      const Tensor& t = p->second;
      if (t.dtype() == DType::FLOAT32 && t.numel() > 0) w.write(t.data(), static_cast<size_t>(t.numel()) * 4);
    }
    for (const auto& [name, t8] : bytes_order) {
      if (t8) {
        const size_t n = static_cast<size_t>(shape_numel(t8->shape));
        if (n > 0) w.write(t8->values(), n);
      } else {
        const Tensor& t = tensors.at(name);
        if (t.numel() > 0) w.write(t.data_bool(), static_cast<size_t>(t.numel()));
      }
    }
  } catch (const IoError& e) {
    throw SafeTensorsError(e.what());
  }
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata,
                      const std::map<std::string, Int8Tensor>& int8) {
  std::optional<AtomicFileWriter> w;
  try {
    w.emplace(path);
  } catch (const IoError& e) {
    throw SafeTensorsError(e.what());
  }
  write_safetensors(*w, tensors, metadata, int8);
  try {
    w->commit();
  } catch (const IoError& e) {
    throw SafeTensorsError(e.what());
  }
}

}  // namespace tfm::io
