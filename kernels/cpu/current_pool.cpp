// The kernels' current pool (see current_pool.h).
#include "kernels/cpu/current_pool.h"

namespace cb::cpu {

namespace {
thread_local ThreadPool* tls_pool = nullptr;
}  // namespace

ThreadPool* current_pool() { return tls_pool; }
ScopedPool::ScopedPool(ThreadPool* pool) : saved_(tls_pool) { tls_pool = pool; }
ScopedPool::~ScopedPool() { tls_pool = saved_; }

}  // namespace cb::cpu
