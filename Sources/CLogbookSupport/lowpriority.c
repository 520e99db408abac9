#define _GNU_SOURCE
#include "CLogbookSupport.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/resource.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

struct logbook_low_priority_work {
    void (*body)(void *);
    void *context;
};

static void *logbook_low_priority_main(void *argument) {
    struct logbook_low_priority_work work = *(struct logbook_low_priority_work *)argument;
    free(argument);
#if defined(__linux__)
    // On Linux a nice value belongs to the thread (its kernel task id).
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19);
#endif
    work.body(work.context);
    return NULL;
}

int logbook_run_at_low_priority(void (*body)(void *), void *context) {
    struct logbook_low_priority_work *work = malloc(sizeof *work);
    if (work == NULL) return -1;
    work->body = body;
    work->context = context;
    pthread_attr_t attributes;
    pthread_attr_init(&attributes);
    pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
    pthread_t thread;
    int error = pthread_create(&thread, &attributes, logbook_low_priority_main, work);
    pthread_attr_destroy(&attributes);
    if (error != 0) free(work);
    return error;
}
