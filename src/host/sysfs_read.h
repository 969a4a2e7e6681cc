#pragma once
// Small reads of sysfs and /proc files, for the host's readers (sysfs_ib, pcie).

#include <optional>
#include <string>
#include <vector>

namespace rankcheck {

/// A small sysfs file's first line; nullopt when it cannot be read (an empty GID
/// slot's type reads EINVAL).
std::optional<std::string> read_line(const std::string& path);
/// The names in a folder, sorted; none when it does not exist.
std::vector<std::string> entries(const std::string& dir);
/// "mlx5_2" before "mlx5_10": digits compare as numbers, as the kernel numbers devices.
bool natural_less(const std::string& a, const std::string& b);
bool exists(const std::string& path);
/// A whole file up to `max` bytes (NCCL's configuration, its topology file); nullopt
/// when it cannot be opened, with errno saying why.
std::optional<std::string> read_file(const std::string& path, size_t max);

}  // namespace rankcheck
