// The zip directory reader.
#include "format/zip.hpp"

#include <algorithm>
#include <set>

namespace loom::format {

namespace {

constexpr uint32_t kLocalSig = 0x04034b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kEndSig = 0x06054b50;
constexpr uint32_t kEnd64Sig = 0x06064b50;
constexpr uint32_t kEnd64LocatorSig = 0x07064b50;
constexpr uint64_t kEndSize = 22;
constexpr uint64_t kCentralSize = 46;
constexpr uint64_t kLocalSize = 30;
constexpr uint16_t kZip64ExtraId = 0x0001;

struct EndRecord {
  uint64_t position = 0;  // of the (classic) end record
  uint64_t entries = 0;
  uint64_t cd_size = 0;
  uint64_t cd_offset = 0;
  uint64_t cd_limit = 0;  // the central directory must end by here
};

EndRecord find_end(const ByteSource& src) {
  const uint64_t size = src.size();
  if (size < kEndSize) src.fail("file is too short to be a zip archive", 0);
  // The end record is the last thing in the file, followed only by a comment of up to
  // 65535 bytes.
  const uint64_t window = std::min<uint64_t>(size, kEndSize + 65535);
  std::vector<std::byte> tail(static_cast<size_t>(window));
  src.read(size - window, tail);
  std::optional<uint64_t> found;
  for (uint64_t i = window - kEndSize + 1; i-- > 0;) {
    if (load_le<uint32_t>(tail.data() + i) != kEndSig) continue;
    const uint16_t comment = load_le<uint16_t>(tail.data() + i + 20);
    if (i + kEndSize + comment <= window) {
      found = size - window + i;
      break;
    }
  }
  if (!found) src.fail("no zip end-of-central-directory record: not a zip archive, or truncated", size);

  EndRecord end;
  end.position = *found;
  Cursor c(src, end.position + 4);
  const uint16_t disk = c.read<uint16_t>();
  const uint16_t cd_disk = c.read<uint16_t>();
  const uint16_t entries_disk = c.read<uint16_t>();
  const uint16_t entries = c.read<uint16_t>();
  const uint32_t cd_size = c.read<uint32_t>();
  const uint32_t cd_offset = c.read<uint32_t>();
  end.entries = entries;
  end.cd_size = cd_size;
  end.cd_offset = cd_offset;
  end.cd_limit = end.position;

  // A ZIP64 locator sits right before the classic record when the archive has one.
  bool zip64 = false;
  if (end.position >= 20) {
    Cursor l(src, end.position - 20);
    if (l.read<uint32_t>() == kEnd64LocatorSig) {
      zip64 = true;
      (void)l.read<uint32_t>();  // disk with the ZIP64 end record
      const uint64_t rec = l.read<uint64_t>();
      if (rec > end.position - 20 || end.position - 20 - rec < 56) {
        src.fail("ZIP64 end record offset " + std::to_string(rec) + " is out of range", end.position - 20);
      }
      Cursor r(src, rec);
      if (r.read<uint32_t>() != kEnd64Sig) src.fail("bad ZIP64 end record signature", rec);
      (void)r.read<uint64_t>();  // record size
      (void)r.read<uint16_t>();  // version made by
      (void)r.read<uint16_t>();  // version needed
      const uint32_t disk64 = r.read<uint32_t>();
      const uint32_t cd_disk64 = r.read<uint32_t>();
      (void)r.read<uint64_t>();  // entries on this disk
      end.entries = r.read<uint64_t>();
      end.cd_size = r.read<uint64_t>();
      end.cd_offset = r.read<uint64_t>();
      end.cd_limit = rec;
      if (disk64 != 0 || cd_disk64 != 0) {
        throw Error(ErrorCode::unsupported, "multi-disk zip archives are not supported",
                    {.file = src.name(), .offset = rec});
      }
    }
  }
  if (!zip64) {
    if (disk != 0 || cd_disk != 0 || entries_disk != entries) {
      throw Error(ErrorCode::unsupported, "multi-disk zip archives are not supported",
                  {.file = src.name(), .offset = end.position});
    }
    if (entries == 0xFFFF || cd_size == 0xFFFFFFFFu || cd_offset == 0xFFFFFFFFu) {
      src.fail("zip end record needs ZIP64 values but there is no ZIP64 locator", end.position);
    }
  }
  if (end.cd_offset > end.cd_limit || end.cd_size > end.cd_limit - end.cd_offset) {
    src.fail("central directory [" + std::to_string(end.cd_offset) + ", +" + std::to_string(end.cd_size) +
                 ") lies outside the archive",
             end.position);
  }
  if (end.entries > end.cd_size / kCentralSize || end.entries > kZipMaxEntries) {
    src.fail("central directory claims " + std::to_string(end.entries) + " entries in " +
                 std::to_string(end.cd_size) + " bytes",
             end.position);
  }
  return end;
}

// Replaces the 0xFFFFFFFF placeholders of a central directory entry with the values of
// its ZIP64 extra field.
void apply_zip64_extra(const ByteSource& src, std::span<const std::byte> extra, uint64_t extra_at,
                       ZipEntry& e, bool need_usize, bool need_csize, bool need_offset) {
  size_t pos = 0;
  while (pos + 4 <= extra.size()) {
    const uint16_t id = load_le<uint16_t>(extra.data() + pos);
    const uint16_t len = load_le<uint16_t>(extra.data() + pos + 2);
    if (pos + 4 + len > extra.size()) src.fail("zip extra field runs past its entry", extra_at + pos);
    if (id == kZip64ExtraId) {
      size_t p = pos + 4;
      const size_t end = p + len;
      auto take = [&](uint64_t& field) {
        if (p + 8 > end) src.fail("ZIP64 extra field is too short", extra_at + pos);
        field = load_le<uint64_t>(extra.data() + p);
        p += 8;
      };
      if (need_usize) take(e.uncompressed_size);
      if (need_csize) take(e.compressed_size);
      if (need_offset) take(e.local_header_offset);
      return;
    }
    pos += 4 + len;
  }
  src.fail("zip entry '" + e.name + "' needs a ZIP64 extra field and has none", extra_at);
}

}  // namespace

const ZipEntry* ZipDirectory::find(std::string_view name) const noexcept {
  auto it = by_name.find(name);
  return it == by_name.end() ? nullptr : &entries[it->second];
}

ZipDirectory read_zip_directory(const ByteSource& src) {
  const EndRecord end = find_end(src);
  ZipDirectory dir;
  dir.entries.reserve(static_cast<size_t>(end.entries));
  std::set<std::string, std::less<>> names;
  const uint64_t cd_end = end.cd_offset + end.cd_size;
  Cursor c(src, end.cd_offset);
  for (uint64_t i = 0; i < end.entries; ++i) {
    const uint64_t at = c.position();
    if (cd_end - at < kCentralSize) src.fail("central directory ends inside an entry", at);
    if (c.read<uint32_t>() != kCentralSig) src.fail("bad central directory entry signature", at);
    ZipEntry e;
    (void)c.read<uint16_t>();  // version made by
    (void)c.read<uint16_t>();  // version needed
    e.flags = c.read<uint16_t>();
    e.method = c.read<uint16_t>();
    (void)c.read<uint32_t>();  // time, date
    e.crc32 = c.read<uint32_t>();
    const uint32_t csize = c.read<uint32_t>();
    const uint32_t usize = c.read<uint32_t>();
    const uint16_t name_len = c.read<uint16_t>();
    const uint16_t extra_len = c.read<uint16_t>();
    const uint16_t comment_len = c.read<uint16_t>();
    const uint16_t disk = c.read<uint16_t>();
    (void)c.read<uint16_t>();  // internal attributes
    (void)c.read<uint32_t>();  // external attributes
    const uint32_t lho = c.read<uint32_t>();
    if (uint64_t{name_len} + extra_len + comment_len > cd_end - c.position()) {
      src.fail("central directory entry runs past the directory", at);
    }
    e.name = c.read_string(name_len, 65535, "zip entry name");
    const uint64_t extra_at = c.position();
    std::vector<std::byte> extra(extra_len);
    c.read_bytes(extra);
    c.skip(comment_len);
    e.compressed_size = csize;
    e.uncompressed_size = usize;
    e.local_header_offset = lho;
    const bool need_u = usize == 0xFFFFFFFFu, need_c = csize == 0xFFFFFFFFu, need_o = lho == 0xFFFFFFFFu;
    if (need_u || need_c || need_o) apply_zip64_extra(src, extra, extra_at, e, need_u, need_c, need_o);
    if (disk != 0 && disk != 0xFFFF) {
      throw Error(ErrorCode::unsupported, "multi-disk zip archives are not supported",
                  {.file = src.name(), .offset = at});
    }
    if (e.flags & 0x1) {
      throw Error(ErrorCode::unsupported, "zip entry '" + e.name + "' is encrypted",
                  {.file = src.name(), .offset = at});
    }
    if (!names.insert(e.name).second) src.fail("duplicate zip entry '" + e.name + "'", at);

    // The local header repeats the name and may carry a different extra field (torch
    // pads it so that the data starts 64-byte aligned).
    if (e.local_header_offset > end.cd_offset || end.cd_offset - e.local_header_offset < kLocalSize) {
      src.fail("zip entry '" + e.name + "' has its local header outside the archive data", at);
    }
    Cursor l(src, e.local_header_offset);
    if (l.read<uint32_t>() != kLocalSig) {
      src.fail("bad local header signature for zip entry '" + e.name + "'", e.local_header_offset);
    }
    l.skip(22);
    const uint16_t local_name_len = l.read<uint16_t>();
    const uint16_t local_extra_len = l.read<uint16_t>();
    const uint64_t name_at = l.position();
    if (local_name_len != name_len ||
        l.read_string(local_name_len, 65535, "zip entry name") != e.name) {
      src.fail("local header name differs from the central directory's '" + e.name + "'", name_at);
    }
    e.data_offset = e.local_header_offset + kLocalSize + local_name_len + local_extra_len;
    if (e.data_offset > end.cd_offset || e.compressed_size > end.cd_offset - e.data_offset) {
      src.fail("data of zip entry '" + e.name + "' (" + std::to_string(e.compressed_size) +
                   " bytes) runs past the archive data",
               e.data_offset);
    }
    if (e.is_stored() && e.compressed_size != e.uncompressed_size) {
      src.fail("stored zip entry '" + e.name + "' has different compressed and uncompressed sizes", at);
    }
    dir.entries.push_back(std::move(e));
  }
  // Built once the vector no longer moves, so the views stay valid.
  dir.by_name.reserve(dir.entries.size());
  for (size_t i = 0; i < dir.entries.size(); ++i) dir.by_name.emplace(dir.entries[i].name, i);
  return dir;
}

}  // namespace loom::format
