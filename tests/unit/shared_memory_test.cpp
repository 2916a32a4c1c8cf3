// Mapping::anonymous: the host's private buffers, zeroed, aligned and advised
// for transparent huge pages.
#include "transport/shared_memory.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

using namespace ggml_remote;

namespace {

constexpr size_t kHugePage = 2u << 20;

// The VmFlags line of /proc/self/smaps for the mapping that holds `address`.
std::string vm_flags_of(const void *address) {
    const auto at = reinterpret_cast<uintptr_t>(address);
    std::ifstream smaps("/proc/self/smaps");
    std::string line;
    bool inside = false;
    while (std::getline(smaps, line)) {
        uintptr_t start = 0, end = 0;
        char dash = 0;
        std::istringstream range(line);
        if (range >> std::hex >> start >> dash >> end && dash == '-') {
            inside = start <= at && at < end;
        } else if (inside && line.rfind("VmFlags:", 0) == 0) {
            return line;
        }
    }
    return "";
}

}  // namespace

TEST(SharedMemory, AnonymousMemoryIsZeroedWritableAndStartsOnAHugePage) {
    const size_t size = 5 * kHugePage + 123;
    Mapping memory;
    ASSERT_TRUE(Mapping::anonymous(size, &memory).ok());
    ASSERT_EQ(memory.size(), size);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(memory.data()) % kHugePage, 0u);
    const auto *bytes = static_cast<const uint8_t *>(memory.data());
    for (size_t i = 0; i < size; i += 4096) ASSERT_EQ(bytes[i], 0) << "at " << i;
    static_cast<uint8_t *>(memory.data())[size - 1] = 7;
    EXPECT_EQ(bytes[size - 1], 7);
}

TEST(SharedMemory, AnonymousMemoryOfAHugePageOrMoreIsAdvisedForHugePages) {
    if (!std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled")) GTEST_SKIP() << "a kernel without THP";
    Mapping memory;
    ASSERT_TRUE(Mapping::anonymous(3 * kHugePage, &memory).ok());
    const std::string flags = vm_flags_of(memory.data());
    ASSERT_FALSE(flags.empty()) << "no mapping in /proc/self/smaps holds the memory";
    EXPECT_NE(flags.find(" hg"), std::string::npos) << flags;
}

// The store writes a tensor's partial end pages itself and maps the rest from a
// file: those end pages must not take a huge page each.
TEST(SharedMemory, PagesThatPreferSmallPagesAreNotAdvisedForHugePages) {
    if (!std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled")) GTEST_SKIP() << "a kernel without THP";
    Mapping memory;
    ASSERT_TRUE(Mapping::anonymous(3 * kHugePage, &memory).ok());
    auto *bytes = static_cast<uint8_t *>(memory.data());
    memory.prefer_small_pages(kHugePage + 100, 10);
    const std::string flags = vm_flags_of(bytes + kHugePage + 100);
    EXPECT_NE(flags.find(" nh"), std::string::npos) << flags;
    EXPECT_EQ(flags.find(" hg"), std::string::npos) << flags;
    EXPECT_NE(vm_flags_of(bytes).find(" hg"), std::string::npos) << "the rest keeps its huge pages";
    EXPECT_NE(vm_flags_of(bytes + kHugePage + 4096).find(" hg"), std::string::npos) << "from the next page on";
}

TEST(SharedMemory, AnonymousMemoryFreesItsWholeReservationOnDestruction) {
    void *data = nullptr;
    {
        Mapping memory;
        ASSERT_TRUE(Mapping::anonymous(kHugePage, &memory).ok());
        data = memory.data();
        ASSERT_FALSE(vm_flags_of(data).empty());
    }
    EXPECT_TRUE(vm_flags_of(data).empty()) << "the memory is still mapped";
}

TEST(SharedMemory, AnEmptyAnonymousMappingIsRefused) {
    Mapping memory;
    EXPECT_FALSE(Mapping::anonymous(0, &memory).ok());
    EXPECT_FALSE(Mapping::anonymous(4096, &memory, 4096).ok()) << "a phase of a whole page";
}

// A buffer that is to share pages with a file starts where the file's bytes do in a page.
TEST(SharedMemory, AnonymousMemoryCanStartInsideAPage) {
    const size_t size = 2 * kHugePage, phase = 4096 - 96;
    Mapping memory;
    ASSERT_TRUE(Mapping::anonymous(size, &memory, phase).ok());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(memory.data()) % 4096, phase);
    auto *bytes = static_cast<uint8_t *>(memory.data());
    EXPECT_EQ(bytes[0], 0);
    EXPECT_EQ(bytes[size - 1], 0);
    bytes[size - 1] = 7;
    EXPECT_EQ(bytes[size - 1], 7);
}

// A kernel that runs off a buffer's end must fault rather than reach whatever the
// worker mapped next to it.
TEST(SharedMemoryDeathTest, AWriteJustPastAnAnonymousMappingFaults) {
    Mapping memory;
    ASSERT_TRUE(Mapping::anonymous(kHugePage, &memory).ok());
    auto *past_end = static_cast<volatile uint8_t *>(memory.data()) + kHugePage + 64;
    auto *before = static_cast<volatile uint8_t *>(memory.data()) - 64;
    EXPECT_DEATH(*past_end = 1, "");
    EXPECT_DEATH(*before = 1, "");
}

TEST(SharedMemoryDeathTest, AWriteAPagePastAMappingInsideAPageFaults) {
    Mapping memory;
    ASSERT_TRUE(Mapping::anonymous(kHugePage, &memory, 4096 - 96).ok());
    auto *past_end = static_cast<volatile uint8_t *>(memory.data()) + kHugePage + 4096;
    auto *before = static_cast<volatile uint8_t *>(memory.data()) - 4096;
    EXPECT_DEATH(*past_end = 1, "");
    EXPECT_DEATH(*before = 1, "");
}

TEST(SharedMemoryDeathTest, AReadJustPastAFileMappingFaults) {
    UniqueFd file;
    ASSERT_TRUE(create_shared_memory(8192, "guarded", &file).ok());
    Mapping memory;
    ASSERT_TRUE(Mapping::map(file.get(), 0, 8192, true, &memory).ok());
    static_cast<uint8_t *>(memory.data())[8191] = 1;
    auto *past_end = static_cast<volatile uint8_t *>(memory.data()) + 8192 + 100;
    EXPECT_DEATH((void)*past_end, "");
}

// Huge pages can back a file mapping only where its address and its file offset
// agree modulo 2 MiB, as the kernel arranges for a plain mmap of a model file.
TEST(SharedMemory, AFileMappingKeepsItsOffsetModuloAHugePage) {
    UniqueFd file;
    ASSERT_TRUE(create_shared_memory(6 * kHugePage, "aligned", &file).ok());
    for (uint64_t offset : {uint64_t(0), uint64_t(kHugePage + 4096), uint64_t(3 * kHugePage + 123)}) {
        Mapping memory;
        ASSERT_TRUE(Mapping::map(file.get(), offset, kHugePage, false, &memory).ok());
        EXPECT_EQ(reinterpret_cast<uintptr_t>(memory.data()) % kHugePage, offset % kHugePage) << "offset " << offset;
    }
}
