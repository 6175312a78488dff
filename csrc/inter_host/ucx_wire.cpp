#include "inter_host/ucx_wire.hpp"

#include <algorithm>

#include "ucx/ucx_api.hpp"

namespace dummy_collectives::inter_host {

void UcxLinks::Request::posted(ucs_status_ptr_t result, const ucp_tag_recv_info_t& immediate) {
  if (UCS_PTR_IS_PTR(result)) {
    handle = result;
  } else {
    done = true;
    status = UCS_PTR_STATUS(result);
    length = immediate.length;
    senderTag = immediate.sender_tag;
  }
}

bool UcxLinks::Request::test() {
  if (done) {
    return true;
  }
  const ucx::Api& ucp = ucx::api();
  if (receive) {
    ucp_tag_recv_info_t info{};
    status = ucp.ucp_tag_recv_request_test(handle, &info);
    length = info.length;
    senderTag = info.sender_tag;
  } else {
    status = ucp.ucp_request_check_status(handle);
  }
  if (status == UCS_INPROGRESS) {
    return false;
  }
  ucp.ucp_request_free(handle);
  handle = nullptr;
  done = true;
  return true;
}

namespace ucx_wire {
namespace {

// Tells UCX where a request's memory lies: a CUDA tensor's, which UCX then moves where it is
// (no detection of each pointer); host memory otherwise.
void setMemoryType(ucp_request_param_t& params, const at::Tensor& keep) {
  if (keep.defined() && keep.is_cuda()) {
    params.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    params.memory_type = UCS_MEMORY_TYPE_CUDA;
  }
}

// Posts a receive through `receive(params)`, UCX's call with the buffer and what to match bound;
// a receive that completes at once reports its tag and length through the parameters.
template <typename Receive>
void postReceiveWith(UcxLinks::Request& request, const Receive& receive) {
  ucp_tag_recv_info_t info{};
  ucp_request_param_t params{};
  params.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_RECV_INFO;
  params.datatype = ucp_dt_make_contig(1);
  params.recv_info.tag_info = &info;
  setMemoryType(params, request.keep);
  const ucs_status_ptr_t result = receive(&params);
  request.receive = true;
  request.posted(result, info);
}

} // namespace

int piecesOf(PeerLinks::Kind kind, int64_t bytes) {
  if (kind != PeerLinks::Kind::kData || bytes <= UcxLinks::kPieceBytes) {
    return 1;
  }
  return static_cast<int>((bytes + UcxLinks::kPieceBytes - 1) / UcxLinks::kPieceBytes);
}

Piece pieceOf(PeerLinks::Kind kind, int64_t bytes, size_t k) {
  if (piecesOf(kind, bytes) == 1) {
    return {0, bytes};
  }
  const int64_t at = static_cast<int64_t>(k) * UcxLinks::kPieceBytes;
  return {at, std::min(bytes - at, UcxLinks::kPieceBytes)};
}

void postSend(UcxLinks::Request& request, ucp_ep_h ep, const void* data, size_t length,
              uint64_t tag) {
  ucp_request_param_t params{};
  params.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
  params.datatype = ucp_dt_make_contig(1);
  setMemoryType(params, request.keep);
  request.receive = false;
  request.posted(ucx::api().ucp_tag_send_nbx(ep, data, length, tag, &params),
                 ucp_tag_recv_info_t{tag, length});
}

void postReceive(UcxLinks::Request& request, ucp_worker_h worker, void* data, size_t length,
                 ucp_tag_message_h message) {
  postReceiveWith(request, [&](const ucp_request_param_t* params) {
    return ucx::api().ucp_tag_msg_recv_nbx(worker, data, length, message, params);
  });
}

void postExpected(UcxLinks::Request& request, ucp_worker_h worker, void* data, size_t length,
                  uint64_t tag, uint64_t mask) {
  postReceiveWith(request, [&](const ucp_request_param_t* params) {
    return ucx::api().ucp_tag_recv_nbx(worker, data, length, tag, mask, params);
  });
}

} // namespace ucx_wire
} // namespace dummy_collectives::inter_host
