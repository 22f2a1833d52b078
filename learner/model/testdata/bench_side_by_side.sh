#!/bin/sh
# Side-by-side training-step benchmark: BenchmarkTrainStep (Go) alternated
# with testdata/bench_train_step.py (PyTorch CPU, Debian python3-torch with
# libopenblas0-pthread) at 2 threads, 2 threads with OMP_WAIT_POLICY=PASSIVE,
# and 1 thread, so that load from other processes falls on both alike.
#
# Run from the repository root:  sh learner/model/testdata/bench_side_by_side.sh [rounds]
set -e
rounds=${1:-3}
dir=$(mktemp -d)
go test -c -o "$dir/model.test" ./learner/model/
py=learner/model/testdata/bench_train_step.py
i=1
while [ "$i" -le "$rounds" ]; do
	echo "round $i"
	"$dir/model.test" -test.run '^$' -test.bench 'TrainStep$' -test.benchtime 5x | grep Benchmark
	/usr/bin/python3 $py 2 5 | grep threads | sed 's/^/torch /'
	OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 $py 2 5 | grep threads | sed 's/^/torch PASSIVE /'
	/usr/bin/python3 $py 1 5 | grep threads | sed 's/^/torch /'
	i=$((i + 1))
done
rm -rf "$dir"
