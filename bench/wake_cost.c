// bench/wake_cost.c — what one timer sleep and wake-up costs on this host, with nothing else
// running: the floor under any load generator that wakes for each send (docs/performance.md,
// "Where the CPU goes").
//
//   cc -O2 -o /tmp/wake_cost bench/wake_cost.c && taskset -c 0 /tmp/wake_cost 1000 5000
//
// Sleeps to absolute CLOCK_MONOTONIC deadlines PERIOD_US apart (timer slack 1 ns, as the
// loader's shards), COUNT times, and prints the CPU time per wake-up (user + system) and how
// late the wake-ups ended (percentiles, µs).
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc != 3 || atol(argv[1]) <= 0 || atoi(argv[2]) < 1000) {
        fprintf(stderr, "usage: wake_cost PERIOD_US COUNT (COUNT >= 1000)\n");
        return 2;
    }
    long period_us = atol(argv[1]);
    int n = atoi(argv[2]);
    prctl(PR_SET_TIMERSLACK, 1);
    double *late = malloc(n * sizeof(double));
    if (!late) return 1;
    struct timespec due;
    clock_gettime(CLOCK_MONOTONIC, &due);
    for (int i = 0; i < n; i++) {
        due.tv_nsec += period_us * 1000;
        while (due.tv_nsec >= 1000000000) {
            due.tv_nsec -= 1000000000;
            due.tv_sec++;
        }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due, NULL);
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        late[i] = (now.tv_sec - due.tv_sec) * 1e6 + (now.tv_nsec - due.tv_nsec) / 1e3;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu_us = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 + ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
    qsort(late, n, sizeof(double), by_value);
    printf("period %ld us, %d wake-ups: CPU %.1f us per wake-up; late p50 %.0f p90 %.0f p99 %.0f p99.9 %.0f max %.0f us\n",
           period_us, n, cpu_us / n, late[n / 2], late[n * 9 / 10], late[n * 99 / 100], late[n * 999 / 1000],
           late[n - 1]);
    free(late);
    return 0;
}
