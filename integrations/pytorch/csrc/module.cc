// The Python module loom_torch._C: the ProcessGroupLoom type and the
// creator that loom_torch registers with torch.distributed.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/utils/pybind.h>

#include "integrations/pytorch/csrc/process_group_loom.h"

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  m.doc() = "loom collectives as a torch.distributed backend";
  // Base class and holder as torch registers them (torch._C._distributed_c10d),
  // so the object is a torch ProcessGroup in Python.
  py::class_<loom_torch::ProcessGroupLoom, c10d::ProcessGroup,
             c10::intrusive_ptr<loom_torch::ProcessGroupLoom>>(m, "ProcessGroupLoom")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout) {
             return c10::make_intrusive<loom_torch::ProcessGroupLoom>(store, rank, size, timeout);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>());
  m.def("create_process_group", &loom_torch::CreateProcessGroupLoom, py::arg("store"),
        py::arg("rank"), py::arg("size"), py::arg("timeout"),
        py::call_guard<py::gil_scoped_release>(),
        "torch.distributed's creator for backend 'loom': (store, rank, size, timeout)");
  m.def("version", [] { return std::string(loom::Version()); });
}
