#!/bin/sh
# /init of the Bochs guest (busybox sh). tools/bochs/run.sh appends /run/job.sh to the initramfs:
# it sets JOB_TOKEN (fresh for every run, so no output of the program or of an earlier run can
# pass for a marker) and defines run_job. Markers go to the serial console on lines of their own.
/bin/busybox --install -s /bin
export PATH=/bin HOME=/ TERM=dumb
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
# No tmpfs on /tmp: the initramfs root is already writable, and a mount there would hide a
# program that run.sh copied in under its host path in /tmp (a CI checkout may live there).
mkdir -p /tmp
exec </dev/console >/dev/console 2>&1
stty -onlcr 2>/dev/null  # no carriage return after every newline
. /run/job.sh
echo "@@BOOTED-$JOB_TOKEN uptime $(cut -d' ' -f1 /proc/uptime) s"
echo "@@FLAGS-$JOB_TOKEN $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2)"
run_job </dev/null
rc=$?
# A newline first: the program's last line may lack one.
printf '\n@@EXIT-%s=%s\n' "$JOB_TOKEN" "$rc"
# No poweroff: the kernel's halt message could land inside the marker still queued on the
# console. The runner stops Bochs once it has read the marker; an idle guest costs nothing.
while :; do sleep 3600; done
