"""function"""
