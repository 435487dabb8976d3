package ratelimit

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The scripts are numaflow-throttling's, unchanged
// (rust/numaflow-throttling/src/state/store/lua at numaproj/numaflow
// 63ba4e8c), so the keys and their meaning are Numaflow's: <prefix>:heartbeats
// and <prefix>:poolsize (sorted sets by processor), <prefix>:prev_max_filled
// and <prefix>:prev_max_filled_ttl (the resumed ramp-up).
var (
	//go:embed lua/register.lua
	registerLua string
	//go:embed lua/deregister.lua
	deregisterLua string
	//go:embed lua/sync_pool_size.lua
	syncLua string

	registerScript   = redis.NewScript(registerLua)
	deregisterScript = redis.NewScript(deregisterLua)
	syncScript       = redis.NewScript(syncLua)
)

// RedisStore is Numaflow's redisStore in single mode: one Redis server
// named by a redis:// or rediss:// URL.
type RedisStore struct {
	client *redis.Client
	prefix string
	ttl    int // seconds
}

var _ Store = (*RedisStore)(nil)

// NewRedisStore connects lazily to the server at url; keys start with
// prefix, and a replica whose heartbeat is older than ttl is dropped.
func NewRedisStore(url, prefix string, ttl time.Duration) (*RedisStore, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	// Calls are heartbeats repeated every 100ms: fail fast and let the next
	// one retry rather than queue behind a server that is away.
	opts.DialTimeout = time.Second
	opts.ReadTimeout = 500 * time.Millisecond
	opts.WriteTimeout = 500 * time.Millisecond
	opts.MaxRetries = -1
	opts.PoolSize = 2
	opts.DisableIdentity = true
	return &RedisStore{client: redis.NewClient(opts), prefix: prefix, ttl: max(int(ttl/time.Second), 1)}, nil
}

// Register runs register.lua.
func (s *RedisStore) Register(ctx context.Context, id string) (int, float64, error) {
	res, err := registerScript.Run(ctx, s.client, []string{s.prefix}, id, s.ttl).Slice()
	if err != nil {
		return 0, 0, fmt.Errorf("redis register: %w", err)
	}
	if len(res) != 2 {
		return 0, 0, fmt.Errorf("redis register: answer %v has %d values, want 2", res, len(res))
	}
	size, err1 := strconv.Atoi(fmt.Sprint(res[0]))
	prev, err2 := strconv.ParseFloat(fmt.Sprint(res[1]), 64)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("redis register: answer %v is not a pool size and a number", res)
	}
	return size, prev, nil
}

// Sync runs sync_pool_size.lua with this host's clock as the heartbeat, as
// Numaflow does.
func (s *RedisStore) Sync(ctx context.Context, id string, poolSize int) (Consensus, error) {
	now := time.Now().Unix()
	res, err := syncScript.Run(ctx, s.client, []string{s.prefix}, id, now, poolSize, s.ttl).Slice()
	if err != nil {
		return Consensus{}, fmt.Errorf("redis heartbeat: %w", err)
	}
	if len(res) != 3 {
		return Consensus{}, fmt.Errorf("redis heartbeat: answer %v has %d values, want 3", res, len(res))
	}
	verdict := fmt.Sprint(res[0])
	// Sizes come back as sorted-set scores, which Redis formats as floats.
	size, err1 := strconv.ParseFloat(fmt.Sprint(res[1]), 64)
	active, err2 := strconv.Atoi(fmt.Sprint(res[2]))
	if err1 != nil || err2 != nil || (verdict != "AGREE" && verdict != "DISAGREE") {
		return Consensus{}, fmt.Errorf("redis heartbeat: answer %v is not a verdict, a size and a count", res)
	}
	return Consensus{Agree: verdict == "AGREE", Size: int(size), Active: active}, nil
}

// Deregister runs deregister.lua.
func (s *RedisStore) Deregister(ctx context.Context, id string, maxFilled float64) error {
	err := deregisterScript.Run(ctx, s.client, []string{s.prefix}, id, strconv.FormatFloat(maxFilled, 'f', -1, 32)).Err()
	if err != nil {
		return fmt.Errorf("redis deregister: %w", err)
	}
	return nil
}

// Close closes the connection pool.
func (s *RedisStore) Close() error { return s.client.Close() }

// ValidateRedisURL checks a single-mode URL the way NewRedisStore reads it,
// for the configuration error at start.
func ValidateRedisURL(url string) error {
	if !strings.HasPrefix(url, "redis://") && !strings.HasPrefix(url, "rediss://") {
		return fmt.Errorf("must be a redis:// or rediss:// URL such as redis://redis:6379/0")
	}
	if _, err := redis.ParseURL(url); err != nil {
		return err
	}
	return nil
}
