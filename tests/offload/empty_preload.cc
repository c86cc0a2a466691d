// An empty preloaded library (system/start_cost): what preloading any library costs a
// process start, the floor for librdmasock.so's own cost.
extern "C" __attribute__((visibility("default"))) int rdmasock_empty_preload() { return 0; }
