# One gdb session on a checkpoint of tests/e2e/testdata/pipeworkers.c
# (BENCHMARKS.md, "Reverse execution under gdb: snapshots"): gdb -nx -batch
# -ex 'target remote | bin/tpreplay --gdb-stdio CHECKPOINT' -x THIS PROGRAM,
# once as is and once with TPREPLAY_NO_SNAPSHOTS=1; monitor stats prints
# the time of each reverse command.
info threads
continue
info threads
p $pc
reverse-stepi
p $pc
info threads
reverse-stepi
p $pc
reverse-stepi
p $pc
stepi
p $pc
break pipeworkers.c:48
reverse-continue
info threads
p m.job
p $_thread
reverse-continue
p m.job
p $_thread
delete
continue
bt 1
monitor stats
