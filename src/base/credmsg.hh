// A datagram received with its sender's credentials (SO_PASSCRED on the socket): the
// operator's queries and their answers (preload/report.cc, tools/ss.cc).
#pragma once

#include <cstddef>
#include <sys/socket.h>
#include <sys/un.h>

namespace rdmasock::util {

struct CredMsg {
    sockaddr_un from{};
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(ucred))] = {};
    iovec v;
    msghdr m{};

    // Room for the datagram: `len` bytes at `buf`; then recvmsg(fd, &m, flags).
    CredMsg(void *buf, size_t len) noexcept : v{buf, len}
    {
        m.msg_name = &from;
        m.msg_namelen = sizeof from;
        m.msg_iov = &v;
        m.msg_iovlen = 1;
        m.msg_control = cbuf;
        m.msg_controllen = sizeof cbuf;
    }
    CredMsg(const CredMsg &) = delete;
    CredMsg &operator=(const CredMsg &) = delete;

    // The kernel's credentials of the sender, or null.
    const ucred *cred() noexcept
    {
        for (cmsghdr *cm = CMSG_FIRSTHDR(&m); cm != nullptr; cm = CMSG_NXTHDR(&m, cm))
            if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_CREDENTIALS &&
                cm->cmsg_len >= CMSG_LEN(sizeof(ucred)))
                return reinterpret_cast<const ucred *>(CMSG_DATA(cm));
        return nullptr;
    }
    // The sender's address is an abstract name (its length, else 0).
    size_t abstract_len() const noexcept
    {
        const size_t base = offsetof(sockaddr_un, sun_path) + 1;
        return m.msg_namelen > base && from.sun_path[0] == '\0' ? m.msg_namelen - base : 0;
    }
};

}  // namespace rdmasock::util
