// bench/prearm_cost.c — what arming the timer costs a thread that sleeps to even deadlines,
// and what it costs when the next deadline is armed one wake-up ahead (docs/performance.md,
// "Timer reprogramming and IPIs: the exits a wake-up costs").
//
//   cc -O2 -o /tmp/prearm_cost bench/prearm_cost.c
//   taskset -c 0 /tmp/prearm_cost 0 100000 20000    # clock_nanosleep to each deadline
//   taskset -c 0 /tmp/prearm_cost 1 100000 20000    # two timerfds, the next one armed ahead
//
// MODE 0 sleeps with clock_nanosleep (the timer is armed as the thread goes to sleep, the
// CPU's earliest, so the local timer is reprogrammed); MODE 1 blocks in read() on a timerfd
// armed one period earlier, and arms the one after it (later than the earliest: no
// reprogramming). PERIOD_NS apart, COUNT wake-ups, timer slack 1 ns, /dev/cpu_dma_latency held
// at 0 when it can be opened (root). Prints CPU per wake-up (user + system) and the mean
// lateness.
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

static struct timespec at(long ns) {
    struct timespec t = {ns / 1000000000L, ns % 1000000000L};
    return t;
}

static double cpu_s(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return r.ru_utime.tv_sec + r.ru_stime.tv_sec + (r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s MODE(0|1) PERIOD_NS COUNT\n", argv[0]);
        return 2;
    }
    int mode = atoi(argv[1]), count = atoi(argv[3]);
    long period = atol(argv[2]);
    prctl(PR_SET_TIMERSLACK, 1);
    int dma = open("/dev/cpu_dma_latency", O_WRONLY);
    int32_t zero = 0;
    if (dma >= 0 && write(dma, &zero, sizeof zero) != sizeof zero) dma = -1;
    int fds[2] = {timerfd_create(CLOCK_MONOTONIC, 0), timerfd_create(CLOCK_MONOTONIC, 0)};
    long t = now_ns() + period, late = 0;
    uint64_t expirations;
    if (mode == 1) {
        struct itimerspec s = {.it_value = at(t)};
        timerfd_settime(fds[0], TFD_TIMER_ABSTIME, &s, NULL);
    }
    double c0 = cpu_s();
    for (int i = 0; i < count; i++) {
        if (mode == 0) {
            struct timespec d = at(t);
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &d, NULL);
        } else {
            struct itimerspec s = {.it_value = at(t + period)};
            timerfd_settime(fds[(i + 1) & 1], TFD_TIMER_ABSTIME, &s, NULL);
            if (read(fds[i & 1], &expirations, sizeof expirations) < 0) return 1;
        }
        late += now_ns() - t;
        t += period;
    }
    printf("mode %d, period %ld ns, cpu_dma_latency %s: %.2f us CPU per wake-up, mean late %.1f us\n", mode,
           period, dma >= 0 ? "held at 0" : "not held", (cpu_s() - c0) * 1e6 / count, late / 1000.0 / count);
    return 0;
}
