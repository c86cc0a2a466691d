// The device memory of the library's queues is no fork child's.
//
// A provider maps some of a queue's memory from the device file (soft-RoCE maps every
// CQ's and QP's queue from /dev/infiniband/uverbsN).  The kernel copies such mappings
// into a fork child page table entry by page table entry, and a child never uses them:
// the parent's RDMA objects stay the parent's (a child starts its own copy of
// rdma-core, dl::after_fork_child).  In the VM, 64 connections on RDMA made each
// fork() take 9.6 ms instead of 5.2 ms.  So before a fork, the device mappings made
// since the last fork are marked MADV_DONTFORK (the rings are marked when made).
//
// A range read from /proc/self/maps must still be that mapping when it is advised (else
// the advice would fall on whatever took its address: the child would miss memory).
// The destructors that unmap device memory hold an Unmapping, which counts them; the
// ranges are advised with every Unmapping held off, and only if none ran since the
// read began (else at the next fork).  Not done when the program uses rdma-core itself
// (its device mappings are not ours to change), nor for mappings rdma-core unmaps on
// its own (librdmacm closing a removed device's context).
#pragma once

namespace rdmasock::rdma::device_maps {

// A CQ, QP or device context was made: the next fork looks at the mappings again.
void note_made() noexcept;

// Held by a destructor while it destroys what may unmap device memory.
class Unmapping {
public:
    Unmapping() noexcept;
    ~Unmapping();
    Unmapping(const Unmapping &) = delete;
    Unmapping &operator=(const Unmapping &) = delete;
};

// Before fork(): marks the device mappings made since the last one.  In the child:
// starts afresh (its own objects are made by its own copy of rdma-core).
void before_fork() noexcept;
void after_fork_child() noexcept;

}  // namespace rdmasock::rdma::device_maps
