// Command benthos is the Benthos v4 peer the benchmark compares the runner
// with: the stock CLI with only the components the scenarios use (generate,
// drop, http processor, http_server input), so it builds quickly and its
// binary is the same one every run.
package main

import (
	"context"

	"github.com/redpanda-data/benthos/v4/public/service"

	_ "github.com/redpanda-data/benthos/v4/public/components/io"
	_ "github.com/redpanda-data/benthos/v4/public/components/pure"
)

func main() {
	service.RunCLI(context.Background())
}
