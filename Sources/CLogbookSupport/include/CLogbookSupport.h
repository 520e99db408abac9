#ifndef CLOGBOOK_SUPPORT_H
#define CLOGBOOK_SUPPORT_H

#include <stddef.h>
#include <stdint.h>

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), continuing from `crc`.
/// Pass 0 for a fresh checksum. Uses the SSE4.2 / ARMv8 CRC instructions when the CPU has them.
uint32_t logbook_crc32c(uint32_t crc, const void *data, size_t length);

/// The portable table-driven path alone, for tests that compare it with the hardware path.
uint32_t logbook_crc32c_software_only(uint32_t crc, const void *data, size_t length);

/// Runs `body(context)` on a new detached thread that lowers its own scheduling priority
/// to the lowest (nice 19 on Linux) first: background work that takes only the CPU time
/// the other threads leave. Returns 0, or the error of `pthread_create` (the caller then
/// runs the work itself).
int logbook_run_at_low_priority(void (*body)(void *), void *context);

#endif
