// A stand-in for an NCCL network plugin, as the loader and NCCL's plugin lookup see
// one from outside: a shared library that exports ncclNetPlugin_v<FAKE_NET_ABI> (and
// nothing NCCL could call: rankcheck never loads it, it reads the library's dynamic
// symbols). Built as libnccl-net-v5.so and libnccl-net-v8.so for the tests.

#define FAKE_CAT(a, b) a##b
#define FAKE_SYMBOL(n) FAKE_CAT(ncclNetPlugin_v, n)

extern "C" {
__attribute__((visibility("default"))) char FAKE_SYMBOL(FAKE_NET_ABI)[64] = "fake";
}
