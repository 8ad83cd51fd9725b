/* event_fd: the eventfd wake-ups the consumer and its prefetch thread wait on (poll(2) on the fd):
 * create one, signal it, read it empty. librdkafka's queue I/O events write KC_EVENT_FD_ONE to the
 * same fds (rd_kafka_queue_io_event_enable). Any thread; no Python. */
#ifndef KC_EVENT_FD_H
#define KC_EVENT_FD_H

#include <stdint.h>

/* The value written per signal (also what librdkafka's queue I/O events are told to write). */
extern const uint64_t kc_event_fd_one;

/* A non-blocking, close-on-exec eventfd, or -1 (errno set). */
int kc_event_fd_new(void);
/* Makes `fd` readable (a waiter wakes). */
void kc_event_fd_signal(int fd);
/* Reads `fd` until it is empty (non-blocking fd): what happened since is the waiter's to look at. */
void kc_event_fd_drain(int fd);

#endif
