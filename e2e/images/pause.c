/* The sandbox ("pause") container's process: sleep until told to stop. */
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; exit(0); }

int main(void) {
  signal(SIGTERM, stop);
  signal(SIGINT, stop);
  for (;;) pause();
}
