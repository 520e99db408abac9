// CRC-32C for record framing. One C file because Swift has no portable access to the
// hardware CRC instructions; the software path (slice-by-8) is the reference and is used
// whenever the CPU lacks them. Both compute the same function (checked by the engine tests
// against the published check value 0xE3069283 for "123456789").
#include "CLogbookSupport.h"
#include <pthread.h>
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

// The hardware instruction takes three cycles to give its result and can start one every
// cycle: one stream of words uses a third of it. Large buffers are therefore checksummed as
// three streams at once (the first, second and third part of each block), and the three CRCs
// combined: the CRC of A followed by B is the CRC of A moved past |B| zero bytes, xor the CRC
// of B from zero (the register's update is linear). Moving a CRC past a block's length of
// zeros is a fixed linear map of its 32 bits, kept as four tables of 256 (one per byte of the
// CRC), built once from the polynomial.
#define CRC_BLOCK 4096   /* bytes of each of the three streams, large buffers */
#define CRC_SMALL 256    /* the same, for what is left of a large buffer or a medium one */

static uint32_t shift_block[4][256], shift_small[4][256];
static pthread_once_t shift_once = PTHREAD_ONCE_INIT;

/// The map that moves a CRC register past `bytes` zero bytes, as 32 columns (the image of
/// each bit), by squaring the one-byte map.
static void zeros_map(uint32_t out[32], size_t bytes) {
    uint32_t step[32], acc[32], tmp[32];
    for (int i = 0; i < 32; i++) {
        uint32_t c = 1u << i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : (c >> 1);
        step[i] = c;
        acc[i] = 1u << i;
    }
    while (bytes) {
        if (bytes & 1) {
            for (int i = 0; i < 32; i++) {
                uint32_t v = acc[i], r = 0;
                for (int j = 0; v; j++, v >>= 1) if (v & 1) r ^= step[j];
                tmp[i] = r;
            }
            memcpy(acc, tmp, sizeof acc);
        }
        bytes >>= 1;
        if (bytes) {
            for (int i = 0; i < 32; i++) {
                uint32_t v = step[i], r = 0;
                for (int j = 0; v; j++, v >>= 1) if (v & 1) r ^= step[j];
                tmp[i] = r;
            }
            memcpy(step, tmp, sizeof step);
        }
    }
    memcpy(out, acc, sizeof acc);
}

static void build_shift(uint32_t table[4][256], size_t bytes) {
    uint32_t map[32];
    zeros_map(map, bytes);
    for (int k = 0; k < 4; k++) {
        for (uint32_t b = 0; b < 256; b++) {
            uint32_t v = b << (8 * k), r = 0;
            for (int j = 0; v; j++, v >>= 1) if (v & 1) r ^= map[j];
            table[k][b] = r;
        }
    }
}

static void build_shifts(void) {
    build_shift(shift_block, CRC_BLOCK);
    build_shift(shift_small, CRC_SMALL);
}

static inline uint32_t shifted(const uint32_t table[4][256], uint32_t crc) {
    return table[0][crc & 0xFF] ^ table[1][(crc >> 8) & 0xFF] ^ table[2][(crc >> 16) & 0xFF] ^ table[3][crc >> 24];
}

#if defined(__x86_64__)
#define CRC_WORD(c, w) __builtin_ia32_crc32di((c), (w))
#define CRC_BYTE(c, b) __builtin_ia32_crc32qi((c), (b))
#define CRC_TARGET __attribute__((target("sse4.2")))
static int has_hardware(void) { return __builtin_cpu_supports("sse4.2"); }
#elif defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
#include <arm_acle.h>
#define CRC_WORD(c, w) __crc32cd((uint32_t)(c), (w))
#define CRC_BYTE(c, b) __crc32cb((c), (b))
#define CRC_TARGET
static int has_hardware(void) { return 1; }
#endif

#ifdef CRC_WORD
/// Three streams of `block` bytes each at a time, while at least three blocks are left.
CRC_TARGET
static uint64_t crc32c_three_ways(uint64_t c0, const unsigned char **pp, size_t *np, size_t block,
                                  const uint32_t table[4][256]) {
    const unsigned char *p = *pp;
    size_t n = *np;
    while (n >= 3 * block) {
        uint64_t c1 = 0, c2 = 0;
        const unsigned char *end = p + block;
        do {
            uint64_t w0, w1, w2;
            memcpy(&w0, p, 8);
            memcpy(&w1, p + block, 8);
            memcpy(&w2, p + 2 * block, 8);
            c0 = CRC_WORD(c0, w0);
            c1 = CRC_WORD(c1, w1);
            c2 = CRC_WORD(c2, w2);
            p += 8;
        } while (p < end);
        c0 = shifted(table, (uint32_t)c0) ^ (uint32_t)c1;
        c0 = shifted(table, (uint32_t)c0) ^ (uint32_t)c2;
        p += 2 * block;
        n -= 3 * block;
    }
    *pp = p;
    *np = n;
    return c0;
}

CRC_TARGET
static uint32_t crc32c_hardware(uint32_t crc, const unsigned char *p, size_t n) {
    uint64_t c = crc;
    if (n >= 3 * CRC_SMALL) {
        pthread_once(&shift_once, build_shifts);
        c = crc32c_three_ways(c, &p, &n, CRC_BLOCK, shift_block);
        c = crc32c_three_ways(c, &p, &n, CRC_SMALL, shift_small);
    }
    while (n >= 8) { uint64_t w; memcpy(&w, p, 8); c = CRC_WORD(c, w); p += 8; n -= 8; }
    uint32_t c32 = (uint32_t)c;
    while (n--) c32 = CRC_BYTE(c32, *p++);
    return c32;
}
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
