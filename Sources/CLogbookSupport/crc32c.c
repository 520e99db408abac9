// CRC-32C for record framing. One C file because Swift has no portable access to the
// hardware CRC instructions; the software path (slice-by-8) is the reference and is used
// whenever the CPU lacks them. Both compute the same function (checked by the engine tests
// against the published check value 0xE3069283 for "123456789").
#include "CLogbookSupport.h"
#include <string.h>

static uint32_t table[8][256];
static int table_ready = 0;

static void build_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : (c >> 1);
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = table[0][i];
        for (int t = 1; t < 8; t++) { c = table[0][c & 0xFF] ^ (c >> 8); table[t][i] = c; }
    }
    __atomic_store_n(&table_ready, 1, __ATOMIC_RELEASE);
}

static uint32_t crc32c_software(uint32_t crc, const unsigned char *p, size_t n) {
    if (!__atomic_load_n(&table_ready, __ATOMIC_ACQUIRE)) build_table();
    while (n >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        word = __builtin_bswap64(word);
#endif
        word ^= crc;
        crc = table[7][word & 0xFF] ^ table[6][(word >> 8) & 0xFF] ^
              table[5][(word >> 16) & 0xFF] ^ table[4][(word >> 24) & 0xFF] ^
              table[3][(word >> 32) & 0xFF] ^ table[2][(word >> 40) & 0xFF] ^
              table[1][(word >> 48) & 0xFF] ^ table[0][word >> 56];
        p += 8; n -= 8;
    }
    while (n--) crc = table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2")))
static uint32_t crc32c_hardware(uint32_t crc, const unsigned char *p, size_t n) {
    uint64_t c = crc;
    while (n >= 8) { uint64_t w; memcpy(&w, p, 8); c = __builtin_ia32_crc32di(c, w); p += 8; n -= 8; }
    uint32_t c32 = (uint32_t)c;
    while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
    return c32;
}
static int has_hardware(void) { return __builtin_cpu_supports("sse4.2"); }
#elif defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
#include <arm_acle.h>
static uint32_t crc32c_hardware(uint32_t crc, const unsigned char *p, size_t n) {
    while (n >= 8) { uint64_t w; memcpy(&w, p, 8); crc = __crc32cd(crc, w); p += 8; n -= 8; }
    while (n--) crc = __crc32cb(crc, *p++);
    return crc;
}
static int has_hardware(void) { return 1; }
#else
static uint32_t crc32c_hardware(uint32_t crc, const unsigned char *p, size_t n) {
    return crc32c_software(crc, p, n);
}
static int has_hardware(void) { return 0; }
#endif

uint32_t logbook_crc32c(uint32_t crc, const void *data, size_t length) {
    static int mode = -1; // -1 unknown, 0 software, 1 hardware (benign race: same answer)
    int m = __atomic_load_n(&mode, __ATOMIC_RELAXED);
    if (m < 0) { m = has_hardware() ? 1 : 0; __atomic_store_n(&mode, m, __ATOMIC_RELAXED); }
    crc = ~crc;
    crc = m ? crc32c_hardware(crc, (const unsigned char *)data, length)
            : crc32c_software(crc, (const unsigned char *)data, length);
    return ~crc;
}

uint32_t logbook_crc32c_software_only(uint32_t crc, const void *data, size_t length);
uint32_t logbook_crc32c_software_only(uint32_t crc, const void *data, size_t length) {
    return ~crc32c_software(~crc, (const unsigned char *)data, length);
}
