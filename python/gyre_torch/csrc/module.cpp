// The Python module gyre_torch._C: the backend's creator, which gyre_torch/__init__.py
// registers with torch.distributed under the name "gyre".
#include <torch/extension.h>

#include "gyre_backend.h"
#include "store_bridge.h"

namespace {

c10::intrusive_ptr<gyre_torch::BackendBase> createBackend(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, int64_t timeoutMs,
    const std::string& routeHost) {
  return c10::make_intrusive<gyre_torch::GyreBackend>(
      store, rank, size, std::chrono::milliseconds(timeoutMs), routeHost);
}

gyre_torch::GyreBackend& asGyre(const c10::intrusive_ptr<gyre_torch::BackendBase>& backend,
                                const char* what) {
  auto* gyre = dynamic_cast<gyre_torch::GyreBackend*>(backend.get());
  TORCH_CHECK(gyre != nullptr, "gyre_torch.", what, ": the group's backend is ",
              backend->getBackendName(), ", not gyre");
  return *gyre;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "gyre's torch.distributed backend (see gyre_torch)";
  // Creation waits for the other ranks: release the GIL so this process's other
  // threads (a store server, a progress thread) keep running meanwhile.
  m.def("create_backend", &createBackend, py::arg("store"), py::arg("rank"), py::arg("size"),
        py::arg("timeout_ms"), py::arg("route_host"),
        py::call_guard<py::gil_scoped_release>());
  m.attr("torch_version_major") = TORCH_VERSION_MAJOR;
  // For python/tests/store_bridge_test.py: (gyreResult_t, error text) of one call through
  // the callbacks gyre bootstraps through (store_bridge.h).
  m.def(
      "_call_through_store_bridge",
      [](const c10::intrusive_ptr<c10d::Store>& store, const std::string& op,
         const std::string& key) {
        std::string error;
        int result = gyre_torch::callThroughBridge(store, op, key, &error);
        return std::make_pair(result, error);
      },
      py::arg("store"), py::arg("op"), py::arg("key"), py::call_guard<py::gil_scoped_release>());
  m.attr("supports_shrinking") = GYRE_TORCH_HAS_SHRINK != 0;
  // Whether CUDA tensors run on gyre's device path (else staged through host memory):
  // docs/pytorch.md, "CUDA tensors".
  m.attr("device_path") = GYRE_TORCH_DEVICE_PATH != 0;
  m.def(
      "failed_rank",
      [](const c10::intrusive_ptr<gyre_torch::BackendBase>& backend) {
        return asGyre(backend, "failed_rank").failedRank();
      },
      py::arg("backend"));
  // For gyre_torch.torchft (ProcessGroupGyre): errored(), abort() and the shrink that
  // configure() reuses the communicator with.
  m.def(
      "last_error",
      [](const c10::intrusive_ptr<gyre_torch::BackendBase>& backend) {
        return asGyre(backend, "last_error").lastError();
      },
      py::arg("backend"));
  m.def(
      "abort",
      [](const c10::intrusive_ptr<gyre_torch::BackendBase>& backend) {
        asGyre(backend, "abort").abortNow();
      },
      py::arg("backend"));
#if GYRE_TORCH_HAS_SHRINK
  // The survivors' backend without `excluded` (ranks of this one), through this
  // backend's store; SHRINK_ABORT: this one is revoked first. Collective over the
  // survivors; releases the GIL while they meet.
  m.def(
      "shrink",
      [](const c10::intrusive_ptr<gyre_torch::BackendBase>& backend,
         const std::vector<int64_t>& excluded) {
        return asGyre(backend, "shrink").shrink(excluded, 1, nullptr);
      },
      py::arg("backend"), py::arg("excluded"), py::call_guard<py::gil_scoped_release>());
#endif
}
