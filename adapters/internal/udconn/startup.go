package udconn

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// pause is one turn of a wait for a container to come up (Connect's and
// ReadMapMode's): it logs why the container is not usable yet, at most
// every waitLogEvery since *lastLog so a slow start does not flood the log,
// then sleeps pollInterval or until deadline. It returns false if ctx ended
// first.
func pause(ctx context.Context, log *zap.SugaredLogger, infoFile string, why error, deadline time.Time, lastLog *time.Time) bool {
	if time.Since(*lastLog) >= waitLogEvery {
		*lastLog = time.Now()
		log.Infow("waiting for the Numaflow container", "server_info", infoFile, "reason", why.Error(),
			"gives_up_in", time.Until(deadline).Round(time.Second).String())
	}
	t := time.NewTimer(min(pollInterval, time.Until(deadline)))
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		t.Stop()
		return false
	}
}

// IsReady is the answer of a service's IsReady call (numaflow-go's
// ReadyResponse of any protocol) as Connect's ready check returns it:
// whether the container says it is ready, or the call's error.
func IsReady[R interface{ GetReady() bool }](r R, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	return r.GetReady(), nil
}
