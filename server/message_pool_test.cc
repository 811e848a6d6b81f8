#include "server/message_pool.h"

#include <string>

#include "gtest/gtest.h"
#include "traind/v1/training_service.pb.h"

namespace traind {
namespace {

using Requests = MessagePool<v1::TrainStepRequest>;

// What a parse into a reused message does: protobuf's ParseFromString clears the message first.
void ParseBatchInto(v1::TrainStepRequest* message, size_t batch_bytes) {
  v1::TrainStepRequest wire;
  wire.set_session_id("s");
  v1::Tensor* input = wire.add_inputs();
  input->set_name("input");
  input->set_data(std::string(batch_bytes, '\x7f'));
  ASSERT_TRUE(message->ParseFromString(wire.SerializeAsString()));
}

TEST(MessagePoolTest, AReturnedMessageComesBackEmptyWithItsCapacity) {
  Requests pool(/*max_kept=*/2, /*max_kept_bytes=*/1 << 20);
  const v1::TrainStepRequest* first = nullptr;
  const char* first_data = nullptr;
  {
    Requests::Handle request = pool.Acquire();
    ParseBatchInto(request.get(), 200 * 1024);
    first = request.get();
    first_data = request->inputs(0).data().data();
  }
  EXPECT_EQ(pool.kept(), 1u);
  Requests::Handle again = pool.Acquire();
  EXPECT_EQ(again.get(), first);
  EXPECT_EQ(pool.kept(), 0u);
  // Cleared: no session, no inputs visible.
  EXPECT_TRUE(again->session_id().empty());
  EXPECT_EQ(again->inputs_size(), 0);
  // The next batch of the same size lands in the same memory: no allocation.
  ParseBatchInto(again.get(), 200 * 1024);
  EXPECT_EQ(again->inputs(0).data().data(), first_data);
  EXPECT_EQ(again->inputs(0).data().size(), 200u * 1024);
}

TEST(MessagePoolTest, KeepsAtMostMaxKeptMessages) {
  Requests pool(/*max_kept=*/2, /*max_kept_bytes=*/1 << 20);
  {
    Requests::Handle a = pool.Acquire();
    Requests::Handle b = pool.Acquire();
    Requests::Handle c = pool.Acquire();
    EXPECT_NE(a.get(), b.get());
    EXPECT_NE(b.get(), c.get());
  }
  EXPECT_EQ(pool.kept(), 2u);
}

TEST(MessagePoolTest, FreesAMessageOverTheByteBound) {
  Requests pool(/*max_kept=*/4, /*max_kept_bytes=*/64 * 1024);
  {
    Requests::Handle small = pool.Acquire();
    ParseBatchInto(small.get(), 1024);
  }
  EXPECT_EQ(pool.kept(), 1u);
  {
    Requests::Handle large = pool.Acquire();
    ParseBatchInto(large.get(), 200 * 1024);  // grows the kept message past the bound
  }
  EXPECT_EQ(pool.kept(), 0u);
}

TEST(MessagePoolTest, KeptMessagesShareOneByteBound) {
  Requests pool(/*max_kept=*/4, /*max_kept_bytes=*/64 * 1024);
  {
    Requests::Handle a = pool.Acquire();
    Requests::Handle b = pool.Acquire();
    ParseBatchInto(a.get(), 40 * 1024);
    ParseBatchInto(b.get(), 40 * 1024);
  }
  EXPECT_EQ(pool.kept(), 1u);  // two of 40 KB would hold 80 KB
  {
    Requests::Handle reused = pool.Acquire();  // the bytes it held leave the count with it
    Requests::Handle fresh = pool.Acquire();
    ParseBatchInto(fresh.get(), 1024);
  }
  EXPECT_EQ(pool.kept(), 2u);
}

}  // namespace
}  // namespace traind
