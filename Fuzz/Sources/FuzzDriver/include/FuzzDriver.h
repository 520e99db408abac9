// libFuzzer's driver, called from each target's entry point. SwiftPM links an executable
// with `main` defined as `<Target>_main`, so libFuzzer's own `main` is never linked in: each
// target defines `<Target>_main` and hands its arguments and its test function to the driver.
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*test)(const uint8_t *data, size_t size));

static inline int logbook_run_fuzzer(int argc, char **argv, int (*test)(const uint8_t *data, size_t size)) {
    return LLVMFuzzerRunDriver(&argc, &argv, test);
}
