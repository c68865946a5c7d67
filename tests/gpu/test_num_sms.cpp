// get_num_sms on a real GPU: the device's SM count, MEGAMOE_SM_HEADROOM rounded up to even,
// and set_num_sms winning over the headroom.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "megamoe/error.hpp"
#include "megamoe/heuristics.hpp"
#include "runtime/cuda_driver.hpp"

namespace megamoe {
namespace {

int device_sms() {
  const cuda::Driver& d = cuda::driver();
  CUdevice dev = 0;
  MEGAMOE_CU(d.cuDeviceGet(&dev, 0));
  int n = 0;
  MEGAMOE_CU(d.cuDeviceGetAttribute(&n, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  return n;
}

class NumSms : public testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::driver_available(&why)) GTEST_SKIP() << "no GPU: " << why;
    unsetenv("MEGAMOE_SM_HEADROOM");
    set_num_sms(0);
  }
  void TearDown() override {
    unsetenv("MEGAMOE_SM_HEADROOM");
    set_num_sms(0);
  }
};

TEST_F(NumSms, HeadroomAndPinning) {
  const int sms = device_sms();
  ASSERT_GE(sms, 8);
  EXPECT_EQ(get_num_sms(), sms);
  setenv("MEGAMOE_SM_HEADROOM", "7", 1);
  EXPECT_EQ(get_num_sms(), sms - 8);
  set_num_sms(sms - 3);  // explicit wins over the headroom, odd or not
  EXPECT_EQ(get_num_sms(), sms - 3);
  set_num_sms(sms + 1);
  try {
    get_num_sms();
    ADD_FAILURE() << "a pinned count above the device's SMs was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "num_sms") << e.what();
  }
  set_num_sms(0);
  setenv("MEGAMOE_SM_HEADROOM", "lots", 1);
  try {
    get_num_sms();
    ADD_FAILURE() << "a non-numeric headroom was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "MEGAMOE_SM_HEADROOM") << e.what();
  }
}

}  // namespace
}  // namespace megamoe
