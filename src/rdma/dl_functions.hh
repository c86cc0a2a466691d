// The rdma-core functions the library calls (src/rdma/dl.hh), as
// X(library, name, return type, (parameters), (arguments)).  `nm -D --undefined-only`
// of a build that links rdma-core lists them; one missing here fails the library's link
// (-z defs).  Included by dl.cc (the lookup) and dl_forward.cc (the definitions).
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

// The headers map these two names to inline wrappers; the wrappers call the functions
// by these names, which are the ones dl_forward.cc defines.
#undef ibv_get_device_list
#undef ibv_query_port

#define RS_RDMA_FUNCTIONS(X)                                                                           \
    X(Lib::verbs, ibv_ack_cq_events, void, (ibv_cq * a, unsigned int b), (a, b))                           \
    X(Lib::verbs, ibv_alloc_pd, ibv_pd *, (ibv_context * a), (a))                                          \
    X(Lib::verbs, ibv_close_device, int, (ibv_context * a), (a))                                           \
    X(Lib::verbs, ibv_create_comp_channel, ibv_comp_channel *, (ibv_context * a), (a))                     \
    X(Lib::verbs, ibv_create_cq, ibv_cq *, (ibv_context * a, int b, void *c, ibv_comp_channel *d, int e),  \
      (a, b, c, d, e))                                                                                 \
    X(Lib::verbs, ibv_create_qp, ibv_qp *, (ibv_pd * a, ibv_qp_init_attr *b), (a, b))                      \
    X(Lib::verbs, ibv_dealloc_pd, int, (ibv_pd * a), (a))                                                  \
    X(Lib::verbs, ibv_dereg_mr, int, (ibv_mr * a), (a))                                                    \
    X(Lib::verbs, ibv_destroy_comp_channel, int, (ibv_comp_channel * a), (a))                              \
    X(Lib::verbs, ibv_destroy_cq, int, (ibv_cq * a), (a))                                                  \
    X(Lib::verbs, ibv_destroy_qp, int, (ibv_qp * a), (a))                                                  \
    X(Lib::verbs, ibv_free_device_list, void, (ibv_device * *a), (a))                                      \
    X(Lib::verbs, ibv_get_cq_event, int, (ibv_comp_channel * a, ibv_cq **b, void **c), (a, b, c))          \
    X(Lib::verbs, ibv_get_device_list, ibv_device **, (int *a), (a))                                       \
    X(Lib::verbs, ibv_get_device_name, const char *, (ibv_device * a), (a))                                \
    X(Lib::verbs, ibv_open_device, ibv_context *, (ibv_device * a), (a))                                   \
    X(Lib::verbs, ibv_query_device, int, (ibv_context * a, ibv_device_attr *b), (a, b))                    \
    X(Lib::verbs, ibv_query_port, int, (ibv_context * a, uint8_t b, _compat_ibv_port_attr *c), (a, b, c))  \
    X(Lib::verbs, ibv_reg_mr_iova2, ibv_mr *, (ibv_pd * a, void *b, size_t c, uint64_t d, unsigned int e), \
      (a, b, c, d, e))                                                                                 \
    X(Lib::verbs, ibv_wc_status_str, const char *, (ibv_wc_status a), (a))                                 \
    X(Lib::cm, rdma_accept, int, (rdma_cm_id * a, rdma_conn_param *b), (a, b))                             \
    X(Lib::cm, rdma_ack_cm_event, int, (rdma_cm_event * a), (a))                                           \
    X(Lib::cm, rdma_bind_addr, int, (rdma_cm_id * a, sockaddr *b), (a, b))                                 \
    X(Lib::cm, rdma_connect, int, (rdma_cm_id * a, rdma_conn_param *b), (a, b))                            \
    X(Lib::cm, rdma_create_event_channel, rdma_event_channel *, (void), ())                                \
    X(Lib::cm, rdma_create_id, int, (rdma_event_channel * a, rdma_cm_id **b, void *c, rdma_port_space d),  \
      (a, b, c, d))                                                                                    \
    X(Lib::cm, rdma_create_qp, int, (rdma_cm_id * a, ibv_pd *b, ibv_qp_init_attr *c), (a, b, c))           \
    X(Lib::cm, rdma_destroy_event_channel, void, (rdma_event_channel * a), (a))                            \
    X(Lib::cm, rdma_destroy_id, int, (rdma_cm_id * a), (a))                                                \
    X(Lib::cm, rdma_destroy_qp, void, (rdma_cm_id * a), (a))                                               \
    X(Lib::cm, rdma_disconnect, int, (rdma_cm_id * a), (a))                                                \
    X(Lib::cm, rdma_event_str, const char *, (rdma_cm_event_type a), (a))                                  \
    X(Lib::cm, rdma_free_devices, void, (ibv_context * *a), (a))                                           \
    X(Lib::cm, rdma_freeaddrinfo, void, (rdma_addrinfo * a), (a))                                          \
    X(Lib::cm, rdma_get_cm_event, int, (rdma_event_channel * a, rdma_cm_event **b), (a, b))                \
    X(Lib::cm, rdma_getaddrinfo, int, (const char *a, const char *b, const rdma_addrinfo *c, rdma_addrinfo **d), \
      (a, b, c, d))                                                                                    \
    X(Lib::cm, rdma_get_devices, ibv_context **, (int *a), (a))                                            \
    X(Lib::cm, rdma_listen, int, (rdma_cm_id * a, int b), (a, b))                                          \
    X(Lib::cm, rdma_reject, int, (rdma_cm_id * a, const void *b, uint8_t c), (a, b, c))                    \
    X(Lib::cm, rdma_resolve_addr, int, (rdma_cm_id * a, sockaddr *b, sockaddr *c, int d), (a, b, c, d))    \
    X(Lib::cm, rdma_resolve_route, int, (rdma_cm_id * a, int b), (a, b))                                   \
    X(Lib::cm, rdma_set_option, int, (rdma_cm_id * a, int b, int c, void *d, size_t e), (a, b, c, d, e))


namespace rdmasock::rdma::dl {

enum class Lib { verbs, cm };

enum Fn {
#define RS_ENUM(lib, name, ret, params, args) k_##name,
    RS_RDMA_FUNCTIONS(RS_ENUM)
#undef RS_ENUM
        kFunctions
};

// The real functions, filled by load() (null before it succeeds).
extern void *g_fn[kFunctions];

}  // namespace rdmasock::rdma::dl
